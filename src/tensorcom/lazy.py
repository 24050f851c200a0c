"""Public names of a package imported on first use (PEP 562), so that importing the package, or one
of its submodules, does not import the modules behind every name (a worker process pays for what it
imports at each start).

    __getattr__, __dir__ = lazy_names(__name__, {"Pipeline": "tensorcom.pipeline._pipeline", ...})
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping


def lazy_names(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level `__getattr__` and `__dir__` of module `package`, whose names are `exports`
    (name -> the module that defines it). `__getattr__(name)` imports that module, caches the name in
    `package` and returns it; a name not in `exports` is an AttributeError. `__dir__()` lists the
    module's globals and every exported name."""

    def __getattr__(name: str) -> Any:
        try:
            module_name = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module_name), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
