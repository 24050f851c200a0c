"""tensorcom: feed deep-learning training from data servers.

Public names are imported lazily (on first attribute access), so `import tensorcom` stays light and
never imports torch, Pillow or fsspec.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

# public name -> (module, attribute or None for the module itself)
_EXPORTS: dict[str, tuple[str, str | None]] = {
    "Connection": ("tensorcom.transport.connection", "Connection"),
    "CurveKeyError": ("tensorcom.errors", "CurveKeyError"),
    "DecodeError": ("tensorcom.errors", "DecodeError"),
    "Detached": ("tensorcom.errors", "Detached"),
    "EncodeError": ("tensorcom.errors", "EncodeError"),
    "MessageTooLarge": ("tensorcom.errors", "MessageTooLarge"),
    "MissingDependency": ("tensorcom.errors", "MissingDependency"),
    "OpenError": ("tensorcom.errors", "OpenError"),
    "PeerLost": ("tensorcom.errors", "PeerLost"),
    "Pipeline": ("tensorcom.pipeline", "Pipeline"),
    "RecvTimeout": ("tensorcom.errors", "RecvTimeout"),
    "SampleError": ("tensorcom.errors", "SampleError"),
    "ShardDataset": ("tensorcom.pipeline", "ShardDataset"),
    "ShardError": ("tensorcom.errors", "ShardError"),
    "TarFormatError": ("tensorcom.errors", "TarFormatError"),
    "TensorcomError": ("tensorcom.errors", "TensorcomError"),
    "TransportError": ("tensorcom.errors", "TransportError"),
    "URLError": ("tensorcom.errors", "URLError"),
    "Undelivered": ("tensorcom.errors", "Undelivered"),
    "WorkerDied": ("tensorcom.errors", "WorkerDied"),
    "WorkerError": ("tensorcom.errors", "WorkerError"),
    "dlpack": ("tensorcom.adapters.dlpack", None),
    "images": ("tensorcom.images", None),
    "jax": ("tensorcom.adapters.jax", None),
    "keras": ("tensorcom.adapters.keras", None),
    "ray": ("tensorcom.adapters.ray", None),
    "serve": ("tensorcom.pipeline.serving", "serve"),
    "shards": ("tensorcom.shards", None),
    "tenbin": ("tensorcom.tenbin", None),
    "torch": ("tensorcom.adapters.torch", None),
    "urls": ("tensorcom.urls", None),
    "wire": ("tensorcom.wire", None),
}

# adapters reachable as attributes (tensorcom.torch, .keras, .jax, .dlpack, .ray) but not star-exported:
# `from tensorcom import *` must not hide the framework's own module of the same name
_ADAPTERS = {"dlpack", "jax", "keras", "ray", "torch"}
__all__ = sorted(set(_EXPORTS) - _ADAPTERS)


def __getattr__(name: str) -> Any:
    """Import the module behind a public name on first use and cache the result."""
    try:
        module_name, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'tensorcom' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
