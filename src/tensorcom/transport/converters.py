"""Converters of `Connection` (tensorcom 0.1's): "torch", "torch_cuda", "numpy", as functions per field.

Kept as 0.1 had them, for code written against 0.1: they GUESS which fields are images from their
shape (any rank-3/4 array whose channel axis is 3 or 4 is transposed, so a (B, L, 3) float field
comes back (3, B, L)) and widen dtypes. New code declares its images instead and nothing else is
touched: `tensorcom.adapters.torch.ToTorch(images={0: "NHWC"}, layout="NCHW")`.
torch is imported only when a converter runs, never when this module is imported.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

_FLOATS = (np.float16, np.float32, np.float64)
_WIDEN = (np.int16, np.uint16, np.int32, np.int64)


def is_torch_tensor(value: Any) -> bool:
    """True for a torch.Tensor, tested without importing torch."""
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def to_numpy_plain(value: Any) -> Any:
    """A torch tensor → numpy array (detached, on the CPU, no layout change); anything else unchanged."""
    return value.detach().cpu().numpy() if is_torch_tensor(value) else value


def totorch(dtype: Any = None, device: str = "cpu", transpose: bool = True) -> Callable[[Any], Any]:
    """A converter numpy array → torch tensor, as tensorcom 0.1's: floats become float32 and 16/32/64-bit
    integers int64 unless `dtype` (a torch dtype or its name) is given; with `transpose`, any rank-3
    array whose last axis is 3 or 4 is taken for an HWC image and any such rank-4 array for an NHWC
    batch, and becomes CHW / NCHW (a guess by shape; `ToTorch` takes a declaration). Other values pass through.
    On the CPU with no dtype change the tensor shares memory with the received frame."""

    def convert(value: Any) -> Any:
        if not isinstance(value, np.ndarray):
            return value
        import torch

        target = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        if target is None and value.dtype in _FLOATS:
            target = torch.float32
        elif target is None and value.dtype in _WIDEN:
            target = torch.int64
        if transpose and value.ndim == 3 and value.shape[2] in (3, 4):
            value = value.transpose(2, 0, 1)
        elif transpose and value.ndim == 4 and value.shape[3] in (3, 4):
            value = value.transpose(0, 3, 1, 2)
        with warnings.catch_warnings():  # read-only received buffers: torch warns, we never write
            warnings.simplefilter("ignore", UserWarning)
            return torch.as_tensor(value, dtype=target, device=device)

    return convert


def tonumpy(transpose: bool = True) -> Callable[[Any], Any]:
    """A converter torch tensor → numpy array, as tensorcom 0.1's: with `transpose`, CHW images and NCHW
    batches (3 or 4 channels) become HWC / NHWC. Other values pass through."""

    def convert(value: Any) -> Any:
        if not is_torch_tensor(value):
            return value
        if transpose and value.ndim == 3 and value.shape[0] in (3, 4):
            value = value.permute(1, 2, 0)
        elif transpose and value.ndim == 4 and value.shape[1] in (3, 4):
            value = value.permute(0, 2, 3, 1)
        return value.detach().cpu().numpy()

    return convert


def named_converter(name: str) -> Callable[[Any], Any]:
    """The converter called `name`: "torch", "torch_cuda" or "numpy"; ValueError for anything else."""
    if name == "torch":
        return totorch()
    if name == "torch_cuda":
        return totorch(device="cuda")
    if name == "numpy":
        return tonumpy()
    raise ValueError(f"unknown converter {name!r}; expected 'torch', 'torch_cuda', 'numpy' or a callable")
