"""PyTorch adapter: batches → torch tensors by declaration (`ToTorch`, `to_torch`); `BatchDataset` /
`loader`, a torch IterableDataset / DataLoader over a stream or a pipeline, on a device, with even ends
under torch.distributed; `iterable_dataset`, a Pipeline or ShardDataset (or any re-iterable) for a
DataLoader with workers or torchdata's StatefulDataLoader; and `TensorcomDataset`, 0.1's
IterableDataset over a `Connection`.

    import tensorcom.torch
    for images, labels in tensorcom.torch.loader("zjoin://127.0.0.1:7880", images={0: "NHWC"},
                                                 dtype="float32", device="cuda"):   # one epoch
        ...

Only the fields declared as images change layout; every other array becomes a tensor of the same
shape and dtype. (0.1's `converters="torch"` guesses images by shape; see transport/converters.py.)
A tensor bound for a CUDA device is pinned and copied with non_blocking=True; nothing touches CUDA
when the device is the CPU. torch is imported only when a conversion is set up for another device,
runs, or `BatchDataset` / `TensorcomDataset` is first looked up. docs/frameworks.md ("PyTorch") is
the user's guide.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from typing import Any, Iterator

import numpy as np

from tensorcom.adapters._torch_dataset import wrapper_class

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
        The cast happens on the device (a uint8 image crosses to a GPU at a quarter of float32's size).
    device: where every tensor goes ("cpu", "cuda", "cuda:1", a torch.device). ValueError at once when
        it (or pin_memory=True) needs CUDA and torch here cannot use it; the CPU involves no CUDA call.
    pin_memory: copy tensors into page-locked memory before they go to the device; None (the default):
        when the device is a CUDA device.
    non_blocking: the copy to the device is queued on the current CUDA stream and the call returns at
        once (ordered before any later kernel on that stream, so the tensors are safe to use).

    Fields not declared are never transposed or cast; plain values and lists pass through. A
    `Connection(..., converters=ToTorch(...))` applies it to each received batch (see `transform_with`).
    """

    def __init__(self, images: Mapping[Any, str] | None = None, *, layout: str | None = "NCHW",
                 dtype: Any = None, device: Any = "cpu", pin_memory: bool | None = None, non_blocking: bool = True):
        self.images = _check_images(images)
        if layout is not None and layout not in TARGET_LAYOUTS:
            raise ValueError(f"layout must be one of {TARGET_LAYOUTS} or None, got {layout!r}")
        self.layout, self.dtype, self.device = layout, _torch_dtype(dtype), device
        self.pin_memory, self.non_blocking = pin_memory, bool(non_blocking)
        self._target, self._pin = _transfer(device, pin_memory)

    @property
    def moves(self) -> bool:
        """Whether tensors leave pageable CPU memory (to another device, or pinned)."""
        return self._target is not None or self._pin

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
        if declared is not None:
            if tensor.ndim != len(declared):
                raise ValueError(f"field {key!r} is declared {declared} but has shape {tuple(tensor.shape)}")
            if self.layout is not None:
                wanted = [axis for axis in self.layout if axis in declared]
                tensor = tensor.permute(*[declared.index(axis) for axis in wanted])
        tensor = self.move(tensor)
        if declared is not None and self.dtype is not None:
            tensor = tensor.to(self.dtype)
        return tensor

    def move(self, tensor: Any) -> Any:
        """`tensor` where `device` says: pinned first when pinning, then copied (non_blocking as set);
        the same tensor, untouched, for the CPU."""
        if self._pin:
            tensor = tensor.pin_memory()
        if self._target is not None:
            tensor = tensor.to(self._target, non_blocking=self.non_blocking)
        return tensor

    def __repr__(self) -> str:
        return (f"ToTorch(images={self.images!r}, layout={self.layout!r}, dtype={self.dtype}, device={self.device!r}, "
                f"pin_memory={self.pin_memory!r}, non_blocking={self.non_blocking!r})")


def to_torch(batch: Any, images: Mapping[Any, str] | None = None, *, layout: str | None = "NCHW",
             dtype: Any = None, device: Any = "cpu", pin_memory: bool | None = None, non_blocking: bool = True) -> Any:
    """Convert one batch as `ToTorch(images, layout=..., dtype=..., device=..., ...)` does."""
    return ToTorch(images, layout=layout, dtype=dtype, device=device, pin_memory=pin_memory,
                   non_blocking=non_blocking)(batch)


def _transfer(device: Any, pin_memory: bool | None) -> tuple[Any, bool]:
    """(the torch.device tensors go to, None to leave them on the CPU; whether to pin them first) for
    ToTorch's `device` and `pin_memory`. No torch import for "cpu"; ValueError for a device that is not
    one, and when CUDA is needed (a CUDA device, pin_memory=True) but torch cannot use it here."""
    if pin_memory not in (None, True, False):
        raise TypeError(f"pin_memory must be None (when the device is CUDA), True or False, got {pin_memory!r}")
    if device in (None, "cpu") and not pin_memory:
        return None, False
    import torch

    try:
        target = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"device must be a torch device or its name ('cpu', 'cuda', 'cuda:1'), "
                         f"got {device!r}") from None
    pin = target.type == "cuda" if pin_memory is None else pin_memory
    if target.type == "cuda" or pin:
        _check_cuda(target, f"device={device!r}" if target.type == "cuda" else "pin_memory=True")
    return (None if target.type == "cpu" else target), pin


def _check_cuda(target: Any, asked: str) -> None:
    """ValueError saying why, when torch cannot use CUDA (or the device `target` names) here."""
    import torch

    if not torch.cuda.is_available():
        build = ("a CPU-only build" if torch.version.cuda is None
                 else f"built for CUDA {torch.version.cuda}, but finds no usable GPU")
        fix = "use device='cpu' (the default)" if target.type == "cuda" else "leave pin_memory at None"
        raise ValueError(f"{asked} needs CUDA, and torch {torch.__version__} here is {build}: {fix}")
    if target.type == "cuda" and target.index is not None and target.index >= torch.cuda.device_count():
        raise ValueError(f"{asked}: this machine has {torch.cuda.device_count()} CUDA device(s)")


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


def iterable_dataset(source: Any) -> Any:
    """`source` (a Pipeline, a ShardDataset, any re-iterable) as a torch IterableDataset, for
    `DataLoader(iterable_dataset(pipeline), batch_size=None, num_workers=N)`: in each worker an unsharded
    pipeline takes its own portion; with state_dict() / load_state_dict() on the source, so has the
    dataset (torchdata's StatefulDataLoader saves each worker's position). TypeError if `source` cannot
    be iterated; imports torch."""
    if not hasattr(source, "__iter__"):
        raise TypeError(f"expected an iterable, got {type(source).__name__}: {source!r}")
    if hasattr(source, "handed_to_workers"):
        source.handed_to_workers()  # its state_dict() here then warns that the position is in the workers
    stateful = hasattr(source, "state_dict") and hasattr(source, "load_state_dict")
    return wrapper_class("StatefulWrapper" if stateful else "IterableWrapper")(source)


def _make_batch_dataset_class() -> type:
    """Define BatchDataset on first use (an IterableDataset: tensorcom.adapters._torch_dataset's IterableWrapper)."""
    from tensorcom.adapters._torch_dataset import IterableWrapper
    from tensorcom.adapters import _torch_even as even_ends

    class BatchDataset(IterableWrapper):
        """The batches of a stream or of a local pipeline as torch tensors: a torch IterableDataset for
        `DataLoader(dataset, batch_size=None)` (what `loader()` makes) or a plain for loop. Each iteration
        is one pass: one epoch of the server(s), or one pass of the pipeline.

        source: a URL (a Connection to it opens on the first iteration, with **connection_args, and is
            kept for later passes until `close()`), a Connection, or any re-iterable of batches (a
            Pipeline; under DDP this rank's portion, `pipeline.shard(rank, world_size)`).
        images, layout, dtype, device, pin_memory, non_blocking: how each batch is converted (ToTorch);
            a CUDA device gets pinned tensors copied with non_blocking=True.
        even: every rank of torch.distributed yields the same number of batches in each pass, so no rank
            waits at an uneven end (the rules: tensorcom.adapters._torch_even). None (the default): when
            torch.distributed is initialized with more than one rank; True: required; False: off.
        group: the ranks to keep even (default: all; a gloo group is made when the default backend has
            no gloo). ahead: batches a stream is read ahead of the training loop while keeping even.

        `counts` says what evening did (passes, batches yielded, batches dropped). Runs in the training
        process: a DataLoader worker (num_workers > 0) refuses a device other than the CPU and evening.
        """

        def __init__(self, source: Any, *, images: Mapping[Any, str] | None = None, layout: str | None = "NCHW",
                     dtype: Any = None, device: Any = "cpu", pin_memory: bool | None = None,
                     non_blocking: bool = True, even: bool | None = None, group: Any = None, ahead: int = 2,
                     **connection_args: Any):
            super().__init__(source)
            self.urls = source if isinstance(source, str) or _is_url_list(source) else None
            if connection_args and self.urls is None:
                raise TypeError(f"connection options {sorted(connection_args)} apply only to a URL source, "
                                f"not to {type(source).__name__}")
            if even not in (None, True, False):
                raise TypeError(f"even must be None (when distributed), True or False, got {even!r}")
            if isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 1:
                raise ValueError(f"ahead must be a positive int, got {ahead!r}")
            self.convert = ToTorch(images, layout=layout, dtype=dtype, device=device, pin_memory=pin_memory,
                                   non_blocking=non_blocking)
            self.even, self.group, self.ahead = even, group, ahead
            self.connection_args = connection_args
            self.counts = even_ends.Counts()
            self._opened: Any = None  # the Connection opened from self.urls
            self._reader: Any = None  # the latest evened pass's fetcher (a Readahead's thread may still run)

        def __getstate__(self) -> dict:  # sockets and threads stay in the process that opened them
            return {**self.__dict__, "_opened": None, "_reader": None}

        def __iter__(self) -> Iterator[Any]:
            group = self._even_group()
            stream = self._stream()
            self._join_reader()  # a pass left early: its reader may still hold the stream
            batches = iter(self.source if stream is None else stream)
            if group is None:
                for batch in batches:
                    self.counts.batches += 1
                    yield self.convert(batch)
                self.counts.passes += 1
                return
            self._reader = even_ends.Direct(batches) if stream is None else even_ends.Readahead(batches, self.ahead)
            with contextlib.closing(even_ends.even_pass(self._reader, group, self.counts)) as evened:
                for batch in evened:
                    yield self.convert(batch)

        def _join_reader(self, timeout: float | None = None) -> None:
            """Stop the latest evened pass's reader and wait for it (at most `timeout` seconds)."""
            if self._reader is not None:
                self._reader.join(timeout)
                self._reader = None

        def _even_group(self) -> Any:
            """even_group() in the training process; in a DataLoader worker, no evening and no device."""
            import torch.utils.data

            from tensorcom import settings

            if torch.utils.data.get_worker_info() is None:
                return even_ends.even_group(self.even, self.group)
            if self.convert.moves or self.even or (self.even is None and settings.rank_and_world_size()[1] > 1):
                raise ValueError("a BatchDataset with a device other than the CPU or with even ends runs in the "
                                 "training process: DataLoader(dataset, batch_size=None) with num_workers=0 (the "
                                 "data server, or the pipeline's own workers, do the loading)")
            return None

        def _stream(self) -> Any:
            """The Connection iterated (opened now from self.urls), or None for a local source."""
            from tensorcom.transport.connection import Connection

            if isinstance(self.source, Connection):
                return self.source
            if self.urls is not None and self._opened is None:
                self._opened = Connection(self.urls, **self.connection_args)
            return self._opened

        def __len__(self) -> int:
            from tensorcom.transport.connection import Connection

            if self.urls is not None or isinstance(self.source, Connection):
                raise TypeError("a stream's length is not known ahead: its server ends each epoch")
            return len(self.source)  # TypeError when unknown

        def close(self) -> None:
            """Stop a reader left running and close the Connection opened from a URL (one given is the
            caller's to close)."""
            self._join_reader(timeout=1.0)
            if self._opened is not None:
                self._opened.close()
                self._opened = None

        def __enter__(self) -> "BatchDataset":
            return self

        def __exit__(self, *exc_info: Any) -> None:
            self.close()

    BatchDataset.__qualname__ = "BatchDataset"  # picklable by name (module __getattr__)
    return BatchDataset


def _is_url_list(source: Any) -> bool:
    return isinstance(source, (list, tuple)) and bool(source) and all(isinstance(u, str) for u in source)


def loader(source: Any, **options: Any) -> Any:
    """`torch.utils.data.DataLoader(BatchDataset(source, **options), batch_size=None)`: batches arrive
    made (by the server or the pipeline), converted, on `device`, as many on every rank (see BatchDataset)."""
    from tensorcom.extras import require

    data = require("torch.utils.data")
    return data.DataLoader(__getattr__("BatchDataset")(source, **options), batch_size=None)


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


_LAZY = {"BatchDataset": _make_batch_dataset_class, "TensorcomDataset": _make_dataset_class}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        cls = globals().get(name) or _LAZY[name]()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'tensorcom.adapters.torch' has no attribute {name!r}")
