"""PyTorch adapter: `TensorcomDataset`, a torch IterableDataset over a `Connection` (0.1's name).

torch is imported only when `TensorcomDataset` is first looked up, never when this module is imported.
"""

from __future__ import annotations

from typing import Any


def _make_dataset_class() -> type:
    """Define TensorcomDataset on first use (it subclasses torch's IterableDataset)."""
    from torch.utils.data import IterableDataset

    class TensorcomDataset(IterableDataset):
        """A torch IterableDataset reading `length` batches per pass from `urls` (0.1's signature).

        Extra keyword arguments go to `Connection` (e.g. converters="torch", timeout=...). The
        connection opens on the first iteration and is reused by later passes; `close()` ends it.
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
