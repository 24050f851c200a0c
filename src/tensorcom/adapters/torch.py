"""PyTorch adapter: batches → torch tensors by declaration (`ToTorch`, `to_torch`), and
`TensorcomDataset`, a torch IterableDataset over a `Connection` (0.1's name).

    from tensorcom.adapters.torch import ToTorch, TensorcomDataset
    to_nchw = ToTorch(images={0: "NHWC"}, layout="NCHW", dtype="float32")
    dataset = TensorcomDataset("zsub://127.0.0.1:7880", converters=to_nchw)

Only the fields declared as images change layout; every other array becomes a tensor of the same
shape and dtype. (0.1's `converters="torch"` guesses images by shape; see transport/converters.py.)
torch is imported only when a conversion runs or `TensorcomDataset` is first looked up.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

SOURCE_LAYOUTS = ("NHWC", "NCHW", "HWC", "CHW")
TARGET_LAYOUTS = ("NHWC", "NCHW")


class ToTorch:
    """A batch converter: a list, tuple or dict batch → the same container with arrays as torch tensors.

    images: {field: layout it arrives in} — field a dict key or a list index, layout one of
        "NHWC", "NCHW" (batches of images) or "HWC", "CHW" (one image). Each is checked against the
        array's rank when it arrives.
    layout: the layout image fields are given in, "NCHW" (torch's, the default) or "NHWC"; None keeps
        the declared one. A permuted image is a view of the received data (for NHWC → NCHW, torch's
        channels_last memory format), not a copy.
    dtype: what image fields become (a torch dtype or its name, e.g. "float32"); None keeps theirs.
    device: where every tensor goes ("cpu", "cuda", ...).

    Fields not declared are never transposed or cast; plain values and lists pass through. A
    `Connection(..., converters=ToTorch(...))` applies it to each received batch (see `transform_with`).
    """

    def __init__(self, images: Mapping[Any, str] | None = None, *, layout: str | None = "NCHW",
                 dtype: Any = None, device: Any = "cpu"):
        self.images = _check_images(images)
        if layout is not None and layout not in TARGET_LAYOUTS:
            raise ValueError(f"layout must be one of {TARGET_LAYOUTS} or None, got {layout!r}")
        self.layout, self.dtype, self.device = layout, _torch_dtype(dtype), device

    def convert_batch(self, batch: Any) -> Any:
        """Convert one batch (list, tuple or dict); TypeError for anything else, ValueError when a
        declared image field is missing or its rank does not match its layout."""
        if isinstance(batch, dict):
            keys = list(batch)
        elif isinstance(batch, (list, tuple)):
            keys = list(range(len(batch)))
        else:
            raise TypeError(f"a batch must be a list, tuple or dict, not {type(batch).__name__}")
        missing = [key for key in self.images if key not in keys]
        if missing:
            raise ValueError(f"declared image field(s) {missing} not in the batch, whose fields are {keys}")
        fields = [self.convert_field(key, batch[key]) for key in keys]
        return dict(zip(keys, fields)) if isinstance(batch, dict) else type(batch)(fields)

    __call__ = convert_batch

    def convert_field(self, key: Any, value: Any) -> Any:
        """One field → a tensor on `device` (an image permuted and cast as declared); plain values,
        lists and arrays torch cannot hold (strings, objects) are returned unchanged."""
        tensor = _as_tensor(value)
        if tensor is None:
            return value
        declared = self.images.get(key)
        if declared is None:
            return tensor.to(device=self.device)
        if tensor.ndim != len(declared):
            raise ValueError(f"field {key!r} is declared {declared} but has shape {tuple(tensor.shape)}")
        if self.layout is not None:
            wanted = [axis for axis in self.layout if axis in declared]
            tensor = tensor.permute(*[declared.index(axis) for axis in wanted])
        return tensor.to(device=self.device, dtype=self.dtype)

    def __repr__(self) -> str:
        return f"ToTorch(images={self.images!r}, layout={self.layout!r}, dtype={self.dtype}, device={self.device!r})"


def to_torch(batch: Any, images: Mapping[Any, str] | None = None, *, layout: str | None = "NCHW",
             dtype: Any = None, device: Any = "cpu") -> Any:
    """Convert one batch as `ToTorch(images, layout=..., dtype=..., device=...)` does."""
    return ToTorch(images, layout=layout, dtype=dtype, device=device)(batch)


def _check_images(images: Mapping[Any, str] | None) -> dict:
    """The image declaration as a dict; TypeError / ValueError naming the offending entry."""
    if images is None:
        return {}
    if not isinstance(images, Mapping):
        raise TypeError(f"images must be a dict {{field: layout}}, got {images!r}")
    for key, layout in images.items():
        if layout not in SOURCE_LAYOUTS:
            raise ValueError(f"image field {key!r}: layout must be one of {SOURCE_LAYOUTS}, got {layout!r}")
    return dict(images)


def _torch_dtype(dtype: Any) -> Any:
    """None, a torch dtype or its name → None or the torch dtype; ValueError for an unknown name,
    TypeError for anything else."""
    if dtype is None:
        return None
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a torch dtype or its name (e.g. 'float32'), got {dtype!r}")
    resolved = getattr(torch, dtype, None)
    if isinstance(resolved, torch.dtype):
        return resolved
    raise ValueError(f"{dtype!r} is not the name of a torch dtype (e.g. 'float32', 'uint8')")


def _as_tensor(value: Any) -> Any:
    """A numpy array → a tensor sharing its memory; a tensor → itself; anything else → None."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if not isinstance(value, np.ndarray) or value.dtype.kind in "OSUV":
        return None
    with warnings.catch_warnings():  # read-only received buffers: torch warns, we never write
        warnings.simplefilter("ignore", UserWarning)
        return torch.as_tensor(value)


def _make_dataset_class() -> type:
    """Define TensorcomDataset on first use (it subclasses torch's IterableDataset)."""
    from tensorcom.extras import require

    IterableDataset = require("torch.utils.data").IterableDataset  # MissingDependency names the extra

    class TensorcomDataset(IterableDataset):
        """A torch IterableDataset reading `length` batches per pass from `urls` (0.1's signature).

        Extra keyword arguments go to `Connection`: e.g. converters=ToTorch(images={0: "NHWC"}) (by
        declaration) or 0.1's converters="torch" (by shape), timeout=... The connection opens on the
        first iteration and is reused by later passes; `close()` ends it.
        """

        def __init__(self, urls: Any, length: int = 1000000, **connection_args: Any):
            if not isinstance(length, int) or length < 0:
                raise ValueError(f"length must be a non-negative int, got {length!r}")
            self.urls = urls
            self.length = length
            self.connection_args = connection_args
            self.con = None

        def __iter__(self):
            from tensorcom.transport.connection import Connection

            if self.con is None:
                self.con = Connection(self.urls, epoch=self.length, **self.connection_args)
            for _ in range(self.length):
                yield self.con.recv()

        def __len__(self) -> int:
            return self.length

        def close(self) -> None:
            """Close the underlying connection, if open."""
            if self.con is not None:
                self.con.close()
                self.con = None

    TensorcomDataset.__qualname__ = "TensorcomDataset"  # picklable by name (module __getattr__): spawn workers
    return TensorcomDataset


def __getattr__(name: str) -> Any:
    if name == "TensorcomDataset":
        cls = _make_dataset_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'tensorcom.adapters.torch' has no attribute {name!r}")
