"""DLPack adapter: received batches for any framework that imports DLPack (`from_dlpack`), zero-copy.

    from tensorcom.adapters.dlpack import ToDLPack, to_dlpack
    conn = Connection("zpull://127.0.0.1:7880", converters=ToDLPack())
    for images, labels in conn:
        x = torch.from_dlpack(images)          # or cupy / paddle / mxnet / jax ... .from_dlpack(images)

Each array field becomes a `DLPackArray`: an object with `__dlpack__` and `__dlpack_device__` over
the received array's memory (no copy); plain values, lists and arrays DLPack cannot describe (strings,
objects) pass through. numpy arrays speak DLPack themselves, but the arrays a Connection receives are
read-only views of the ZeroMQ frames, and numpy exports a read-only array only to consumers that ask
for a versioned (DLPack >= 1.0) capsule, which carries a read-only flag (torch does). To an older
consumer (jax's `from_dlpack`, TensorFlow, most others today) `DLPackArray` gives, by `readonly=`:
    "share" (default)  the same memory, flagged writable: zero-copy; a consumer that writes into it
                       changes this batch's received buffer, which no one else holds
    "copy"             a private writable copy
    "refuse"           BufferError, as numpy does
A writable array is always exported as it is. Only CPU arrays arrive from a Connection, so the
device is always DLPack's kDLCPU; moving to an accelerator is the consumer's step (e.g. `.to("cuda")`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

READONLY_POLICIES = ("share", "copy", "refuse")


class DLPackArray:
    """One received array behind the DLPack protocol; `array` is the numpy array itself.

    `__dlpack__(stream=None, max_version=None, dl_device=None, copy=None)` answers as numpy does for a
    versioned request or a writable array, and by the `readonly` policy (module docstring) for an
    unversioned request of a read-only array. `shape`, `dtype` and `np.asarray(obj)` see the array.
    """

    __slots__ = ("array", "readonly")

    def __init__(self, array: np.ndarray, readonly: str = "share"):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"DLPackArray wraps a numpy array, not {type(array).__name__}")
        if readonly not in READONLY_POLICIES:
            raise ValueError(f"readonly must be one of {READONLY_POLICIES}, got {readonly!r}")
        self.array, self.readonly = array, readonly

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """The array itself (np.asarray), or a copy when `copy` is True (np.array) or `dtype` differs."""
        array = self.array if dtype is None else self.array.astype(dtype, copy=False)
        return array.copy() if copy and array is self.array else array

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.array.__dlpack_device__()

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: Any = None, copy: bool | None = None) -> Any:
        options = {key: value for key, value in (("max_version", max_version), ("dl_device", dl_device),
                                                  ("copy", copy)) if value is not None}
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        if self.array.flags.writeable or versioned:
            return self.array.__dlpack__(stream=stream, **options)
        if copy or self.readonly == "copy":
            return self.array.copy().__dlpack__(stream=stream, **options)
        if self.readonly == "refuse":
            raise BufferError("a read-only received array cannot be exported to a DLPack consumer older than 1.0 "
                              "(readonly='refuse'); use readonly='share' or 'copy'")
        return writable_alias(self.array).__dlpack__(stream=stream, **options)

    def __repr__(self) -> str:
        return f"DLPackArray({self.array.dtype} {self.array.shape}, readonly={self.readonly!r})"


def writable_alias(array: np.ndarray) -> np.ndarray:
    """A writable array over the same memory as `array` (no copy), which it keeps alive."""
    return np.asarray(_Alias(array))


class _Alias:
    """`array`'s memory described again through the array interface, without the read-only flag."""

    def __init__(self, array: np.ndarray):
        self.array = array  # the new array's base is this object, which holds the received one
        self.__array_interface__ = {**array.__array_interface__, "data": (array.ctypes.data, False)}


def exportable(value: Any) -> bool:
    """True for a numpy array that DLPack can describe (numbers and booleans, not strings or objects)."""
    return isinstance(value, np.ndarray) and value.dtype.kind in "biufc"


class ToDLPack:
    """A batch converter: a list, tuple or dict batch → the same container with each array field as
    a `DLPackArray` (see the module docstring for `readonly`); other fields pass through. Usable as
    `Connection(..., converters=ToDLPack())`; pickles."""

    def __init__(self, readonly: str = "share"):
        if readonly not in READONLY_POLICIES:
            raise ValueError(f"readonly must be one of {READONLY_POLICIES}, got {readonly!r}")
        self.readonly = readonly

    def convert_batch(self, batch: Any) -> Any:
        """Convert one batch; TypeError for anything but a list, tuple or dict."""
        if isinstance(batch, dict):
            return {key: self.convert_field(value) for key, value in batch.items()}
        if isinstance(batch, (list, tuple)):
            return type(batch)(self.convert_field(value) for value in batch)
        raise TypeError(f"a batch must be a list, tuple or dict, not {type(batch).__name__}")

    __call__ = convert_batch

    def convert_field(self, value: Any) -> Any:
        """An exportable array → DLPackArray; anything else unchanged."""
        return DLPackArray(value, self.readonly) if exportable(value) else value

    def __repr__(self) -> str:
        return f"ToDLPack(readonly={self.readonly!r})"


def to_dlpack(batch: Any, *, readonly: str = "share") -> Any:
    """Convert one batch as `ToDLPack(readonly)` does."""
    return ToDLPack(readonly)(batch)
