"""Build the optional C accelerator of the tar reader; everything else is declared in pyproject.toml.

`tensorcom.shards._ctarscan` is optional: without a C compiler the install still succeeds and
tensorcom.shards._tarscan falls back to its pure-Python scanner (same results, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tensorcom.shards._ctarscan", ["src/tensorcom/shards/_ctarscan.c"], optional=True)])
