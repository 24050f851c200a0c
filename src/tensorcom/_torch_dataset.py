"""`as_iterable_dataset`: any re-iterable as a torch.utils.data.IterableDataset, for DataLoader.

torch is imported only when the function is called. The wrapped object decides how DataLoader
workers split the data (ShardDataset and Pipeline read torch's worker info themselves).
"""

from __future__ import annotations

from typing import Any, Iterable

_classes: dict[str, type] = {}


def _wrapper_class() -> type:
    """The IterableDataset subclass, defined once on first use."""
    if "wrapper" not in _classes:
        import torch.utils.data

        class IterableWrapper(torch.utils.data.IterableDataset):
            """Iterates over `source` (fresh iterator each time); len() is the source's when it has one."""

            def __init__(self, source: Iterable[Any]):
                super().__init__()
                self.source = source

            def __iter__(self):
                return iter(self.source)

            def __len__(self) -> int:
                return len(self.source)  # TypeError when the source's length is unknown

        IterableWrapper.__qualname__ = "IterableWrapper"
        _classes["wrapper"] = IterableWrapper  # picklable by name (module __getattr__): spawn workers
    return _classes["wrapper"]


def as_iterable_dataset(source: Iterable[Any]) -> Any:
    """`source` wrapped as a torch IterableDataset; TypeError if it cannot be iterated."""
    if not hasattr(source, "__iter__"):
        raise TypeError(f"expected an iterable, got {type(source).__name__}: {source!r}")
    return _wrapper_class()(source)


def __getattr__(name: str) -> Any:
    if name == "IterableWrapper":
        return _wrapper_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
