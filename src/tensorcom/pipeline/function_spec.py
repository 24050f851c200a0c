"""Functions named on a command line: "package.module:function" or "path/to/file.py:function".

    load_function(spec, what)   the callable; ValueError naming `what` and `spec` when it does not resolve

As `python -m` does, the current directory (for a file, the file's directory) goes first on sys.path,
so spawned workers, which inherit it, import the same module by the same name.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable


def load_function(spec: str, what: str = "function") -> Callable[..., Any]:
    """The function named by "package.module:function" or "path/to/file.py:function" (also a dotted
    attribute path after the colon); ValueError naming `what` when the name does not resolve."""
    module_name, colon, name = spec.rpartition(":")
    if not colon or not module_name or not name:
        raise ValueError(f"a {what} must be written MODULE:FUNCTION or FILE.py:FUNCTION, got {spec!r}")
    if module_name.endswith(".py"):
        module_name = _module_of_file(module_name, spec, what)
    elif "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
        for part in name.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load {what} {spec!r}: {exc}") from exc
    if not callable(target):
        raise ValueError(f"{what} {spec!r} is not callable")
    return target


def _module_of_file(path: str, spec: str, what: str) -> str:
    """The module name under which FILE.py of `spec` is imported, its directory first on sys.path;
    ValueError when the file is missing or another module of that name is already loaded."""
    if not os.path.isfile(path):
        raise ValueError(f"cannot load {what} {spec!r}: no file {path!r}")
    folder, name = os.path.split(os.path.abspath(path))
    module_name = name[:-3]
    loaded = getattr(sys.modules.get(module_name), "__file__", None)
    if loaded is not None and os.path.abspath(loaded) != os.path.join(folder, name):
        raise ValueError(f"cannot load {what} {spec!r}: a module {module_name!r} from {loaded} "
                         "is already imported; rename the file")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return module_name
