"""Batch helpers of the transport layer: 0.1's transform rules, converters, send-side preparation.

Pure functions on batches (lists, tuples or dicts of arrays and plain values); no sockets. What a
batch is and how many samples it holds is tensorcom.batch (batch_size there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorcom.errors import EncodeError
from tensorcom.transport.converters import named_converter, to_numpy_plain, totorch

_WIDE = {"f8", "i8", "u8"}  # refused unless allow64, as in 0.1


def listify(value: Any) -> list | None:
    """None → None; list/tuple → list; anything else → [value] (0.1's shorthand)."""
    if value is None:
        return None
    return list(value) if isinstance(value, (list, tuple)) else [value]


def transform_with(batch: Any, functions: Any) -> Any:
    """Apply `functions` to a batch's fields: for a list batch function i % len(functions) to field i
    (0.1's rule; None entries skip); for a dict batch, a dict of functions by key, or a single function
    to every value. A batch converter (an object with a `convert_batch(batch)` method, such as
    `tensorcom.adapters.torch.ToTorch`) gets the whole batch instead. Returns a new batch."""
    if hasattr(functions, "convert_batch"):
        return functions.convert_batch(batch)
    if not functions:
        return batch
    if isinstance(batch, dict):
        if isinstance(functions, dict):
            return {k: functions[k](v) if functions.get(k) else v for k, v in batch.items()}
        if len(functions) != 1:
            raise ValueError(f"a dict batch needs a dict of transforms or a single one, got {functions!r}")
        return {k: functions[0](v) if functions[0] else v for k, v in batch.items()}
    if isinstance(functions, dict):
        raise ValueError(f"a dict of transforms needs dict batches, got a {type(batch).__name__}")
    n = len(functions)
    return [functions[i % n](x) if functions[i % n] else x for i, x in enumerate(batch)]


def prepare_batch(batch: Any, allow64: bool) -> Any:
    """A list, tuple or dict batch → the same container with torch tensors turned into numpy arrays.

    TypeError for any other batch; EncodeError naming the field for a 64-bit array unless `allow64`."""
    if isinstance(batch, dict):
        batch = {k: to_numpy_plain(v) for k, v in batch.items()}
        fields = batch.items()
    elif isinstance(batch, (list, tuple)):
        batch = type(batch)(to_numpy_plain(v) for v in batch)
        fields = enumerate(batch)
    else:
        raise TypeError(f"a batch must be a list, tuple or dict, not {type(batch).__name__}")
    if not allow64:
        for key, value in fields:
            if isinstance(value, np.ndarray) and value.dtype.str[1:] in _WIDE:
                raise EncodeError(f"field {key!r} is {value.dtype}; pass allow64=True to send 64-bit arrays")
    return batch


def resolve_converters(converters: Any, device: str | None) -> Any:
    """0.1's converter argument (a name, a callable, a list, a dict) → list/dict of callables; a batch
    converter (an object with `convert_batch`, see `transform_with`) is returned as it is."""
    if hasattr(converters, "convert_batch"):
        return converters
    if converters is None and device is not None:
        return [totorch(device=device)]
    if isinstance(converters, str):
        return [named_converter(converters)]
    if isinstance(converters, dict):
        return converters
    result = listify(converters)
    for item in result or []:
        if item is not None and not callable(item):
            raise TypeError(f"converters must be callables or names, got {item!r}")
    return result
