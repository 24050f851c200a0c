"""tensorcom 0.1's `tensorcom.zcom` import path, for code written against 0.1.

    from tensorcom.zcom import Connection, TensorcomDataset

Everything here is an alias of the current implementation; torch is imported only when
`TensorcomDataset` is looked up or a torch converter runs.
"""

from __future__ import annotations

from tensorcom.batch import batch_size
from tensorcom.lazy import lazy_names
from tensorcom.transport.batches import listify, transform_with
from tensorcom.transport.connection import Connection
from tensorcom.transport.converters import named_converter, tonumpy, totorch
from tensorcom.transport.stats import Statistics
from tensorcom.urls import SCHEMES

# 0.1's table: scheme -> (socket type name, binds?)
schemes = {name: (kind, bind) for name, (kind, bind, _) in SCHEMES.items() if kind is not None}

converter_table = {name: named_converter(name) for name in ("torch", "torch_cuda", "numpy")}

__all__ = ["Connection", "Statistics", "TensorcomDataset", "batch_size", "converter_table", "listify",
           "schemes", "tonumpy", "totorch", "transform_with"]


__getattr__, __dir__ = lazy_names(__name__, {"TensorcomDataset": "tensorcom.adapters.torch"})  # torch on use
