"""Optional dependencies and the extra of tensorcom that installs each.

    require("PIL")   -> the PIL module, or MissingDependency("needs Pillow: pip install 'tensorcom[images]'")

Code that needs an optional package imports it through `require`, so that a core install fails with
one line naming what to install instead of a bare `No module named 'PIL'`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from tensorcom.errors import MissingDependency

# import name -> (distribution to name, tensorcom extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "PIL": ("Pillow", "images"),
    "simplejpeg": ("simplejpeg", "images"),
    "turbojpeg": ("turbojpeg", "images"),
    "fsspec": ("fsspec", "s3"),
    "s3fs": ("s3fs", "s3"),
    "torch": ("torch", "torch"),
    "keras": ("keras", "keras"),
    "jax": ("jax", "jax"),
    "ray": ("ray", "ray"),
    "tqdm": ("tqdm", "progress"),
    "pyarrow": ("pyarrow", "parquet"),
    "datasets": ("datasets", "hf"),
    "prometheus_client": ("prometheus_client", "metrics"),
}


def install_hint(module: str) -> str:
    """`needs Pillow: pip install 'tensorcom[images]'` for import name `module` (its top-level package)."""
    top = module.split(".", 1)[0]
    if top not in EXTRAS:
        raise ValueError(f"{module!r} is not an optional dependency of tensorcom; known: {sorted(EXTRAS)}")
    distribution, extra = EXTRAS[top]
    return f"needs {distribution}: pip install 'tensorcom[{extra}]'"


def require(module: str) -> ModuleType:
    """Import `module` (an optional dependency or a submodule of one, e.g. "torch.utils.data") and
    return it; raise MissingDependency naming the extra to install when it cannot be imported."""
    hint = install_hint(module)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".", 1)[0]
        raise MissingDependency(hint, module=top, extra=EXTRAS[top][1]) from exc
