"""The IterableDataset classes behind tensorcom.torch.iterable_dataset (any re-iterable as a
torch.utils.data.IterableDataset, for DataLoader) and BatchDataset: `wrapper_class(name)`.

torch is imported only when a class is first asked for. The wrapped object decides how DataLoader
workers split the data (a Pipeline, and a ShardDataset through its Pipeline, take the worker's portion
themselves), and stays a plain iterable: the wrapper is applied here, where torch is used. A source
with `handed_to_workers()` (Pipeline, ShardDataset) is told that it was handed to a loader. When it
has `state_dict` / `load_state_dict`, so has the wrapper: torchdata's StatefulDataLoader then calls
them in each worker (the state of the worker's own iterator) and restores each worker's position, so
a resumed loader yields exactly the samples the interrupted one had not.

tensorcom.adapters.torch.BatchDataset extends IterableWrapper: converted batches, a device, a stream
(Connection) as the source, and even ends under torch.distributed.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

_classes: dict[str, type] = {}


def wrapper_class(name: str = "IterableWrapper") -> type:
    """The IterableDataset subclasses ("IterableWrapper", "StatefulWrapper"), defined once on first use."""
    if not _classes:
        from tensorcom.extras import require

        require("torch")  # MissingDependency names the extra without it
        import torch.utils.data

        class IterableWrapper(torch.utils.data.IterableDataset):
            """Iterates over `source` (fresh iterator each time); len() is the source's when it has one."""

            def __init__(self, source: Iterable[Any]):
                super().__init__()
                self.source = source

            def __iter__(self) -> Iterator[Any]:
                # a generator, not the source's own iterator: StatefulDataLoader then saves the
                # dataset's state (which follows its latest iterator) and nothing else
                yield from self.source

            def __len__(self) -> int:
                return len(self.source)  # TypeError when the source's length is unknown

        class StatefulWrapper(IterableWrapper):
            """An IterableWrapper whose state_dict() / load_state_dict() are the source's."""

            def state_dict(self) -> dict[str, Any]:
                return self.source.state_dict()

            def load_state_dict(self, state: dict[str, Any]) -> None:
                self.source.load_state_dict(state)

        for cls in (IterableWrapper, StatefulWrapper):
            cls.__qualname__ = cls.__name__
            _classes[cls.__name__] = cls  # picklable by name (module __getattr__): spawn workers
    return _classes[name]


def __getattr__(name: str) -> Any:
    if name in ("IterableWrapper", "StatefulWrapper"):
        return wrapper_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
