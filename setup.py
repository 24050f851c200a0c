"""Build the optional C accelerator of the tar reader; everything else is declared in pyproject.toml.

`tensorcom._tarscan` is optional: without a C compiler the install still succeeds and
tensorcom.tarscan falls back to its pure-Python scanner (same results, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tensorcom._tarscan", ["src/tensorcom/_tarscan.c"], optional=True)])
