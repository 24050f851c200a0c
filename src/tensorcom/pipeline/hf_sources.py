"""Hugging Face `datasets` objects as pipeline sources, as they stand (the `hf` extra; this module never
imports `datasets` itself: it works on the objects the caller built, so nothing here reaches a hub).

    Pipeline(dataset)                  a datasets.Dataset (or one split of a DatasetDict): HFSource
    Pipeline(iterable_dataset)         a datasets.IterableDataset: HFIterableSource
    hf_source(obj) -> Source | None    the source for `obj`, or None when it is not a datasets object

HFSource (map-style): samples are the dataset's rows (dicts, formatted as the dataset's format says),
read by index in blocks of `block` rows. Portions are strides of the index list, which `shuffle`
permutes per (seed, epoch) first (tensorcom.pipeline.sources.portion_order), so workers and nodes
(rank / world_size) get disjoint rows that make up the whole; `len` is exact; the state is the
position in the portion, restored without reading the rows before it.

HFIterableSource: the dataset's own iteration, split between (node, worker) portions with
datasets.distributed.split_dataset_by_node when there are several (whole shards when the shard count
divides evenly, else every portion skips the rows of the others: give the dataset enough shards);
`shuffle` calls its shuffle(seed=..., buffer_size=...) and set_epoch(epoch). The state is the
dataset's own state_dict(); after a restore the rows that were in its shuffle buffer are not seen
again (the dataset's documented behaviour), so resume is exact only without `shuffle`.
"""

from __future__ import annotations

from typing import Any

from tensorcom.pipeline._node import Indexed, Node, State
from tensorcom.pipeline.sources import IterableSource, Source, portion_length, portion_order
from tensorcom.shards.shardlist import node_and_world, split_index


def _kind(obj: Any) -> str | None:
    """"Dataset", "IterableDataset" or "DatasetDict" when `obj` is one of datasets' (by its class's
    module, so datasets is never imported here), else None."""
    for cls in type(obj).__mro__:
        if cls.__module__.split(".", 1)[0] == "datasets" and cls.__name__ in ("Dataset", "IterableDataset",
                                                                               "DatasetDict", "IterableDatasetDict"):
            return cls.__name__
    return None


def as_source(obj: Any) -> Source:
    """`obj` as a pipeline takes its source: a Source as it is, a Hugging Face dataset as its source
    (hf_source), any other iterable as an IterableSource."""
    return obj if isinstance(obj, Source) else hf_source(obj) or IterableSource(obj)


def hf_source(obj: Any, **options: Any) -> Source | None:
    """HFSource or HFIterableSource for a datasets object, None for anything else; a DatasetDict is a
    TypeError naming its splits (pick one: dataset["train"])."""
    kind = _kind(obj)
    if kind is None:
        return None
    if kind.endswith("Dict"):
        raise TypeError(f"a {kind} holds several splits {sorted(obj)}: pass one of them, e.g. dataset[{sorted(obj)[0]!r}]")
    return HFSource(obj, **options) if kind == "Dataset" else HFIterableSource(obj, **options)


class HFRows(Indexed):
    """Rows dataset[order[i]] for i = position, position + 1, ... (an Indexed node: state {"position": i}),
    read `block` indices at a time (dataset.__getitems__)."""

    def __init__(self, dataset: Any, order: Any, block: int):
        super().__init__(dataset, order)
        self.block = block
        self._rows: list = []
        self._first = 0  # the position of self._rows[0]

    def __next__(self) -> Any:
        if self.position >= len(self.order):
            raise StopIteration
        if not self._first <= self.position < self._first + len(self._rows):
            indices = [int(i) for i in self.order[self.position:self.position + self.block]]
            self._rows, self._first = self.items.__getitems__(indices), self.position
        row = self._rows[self.position - self._first]
        self.position += 1
        return row

    def load_state_dict(self, state: State | None) -> None:
        super().load_state_dict(state)
        self._rows = []


class HFDataset:
    """What the two sources below share (a mixin, not a source): the dataset (of class `kind`),
    `shuffle`, and the node split."""

    kind = "Dataset"

    def __init__(self, dataset: Any, shuffle: bool, rank: int | None, world_size: int | None):
        if _kind(dataset) != self.kind:
            raise TypeError(f"{type(self).__name__} takes a datasets.{self.kind}, got {type(dataset).__name__}")
        self.dataset, self.shuffle = dataset, bool(shuffle)
        self.rank, self.world_size = node_and_world(rank, world_size)

    def portion(self, worker: int, num_workers: int) -> tuple[int, int]:
        """(portion index, number of portions) of this node's `worker` of `num_workers`."""
        return split_index(self.rank, self.world_size, worker, num_workers)


class HFSource(HFDataset, Source):
    """A map-style datasets.Dataset (see the module docstring)."""

    def __init__(self, dataset: Any, *, shuffle: bool = False, rank: int | None = None,
                 world_size: int | None = None, block: int = 64):
        super().__init__(dataset, shuffle, rank, world_size)
        self.block = int(block)

    def open(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> HFRows:
        order = portion_order(len(self.dataset), self.shuffle, seed, epoch, *self.portion(worker, num_workers))
        return HFRows(self.dataset, order, self.block)

    def length(self, worker: int = 0, num_workers: int = 1) -> int:
        return portion_length(len(self.dataset), *self.portion(worker, num_workers))


class HFIterating(Node):
    """The rows of a datasets.IterableDataset, its state the dataset's own state_dict()."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self._rows: Any = None

    def __next__(self) -> Any:
        if self._rows is None:
            self._rows = iter(self.dataset)
        return next(self._rows)

    def state_dict(self) -> State:
        return {"dataset": self.dataset.state_dict()}

    def load_state_dict(self, state: State | None) -> None:
        self._rows = None
        if state is not None:
            self.dataset.load_state_dict(state["dataset"])

    def close(self) -> None:
        self._rows = None


class HFIterableSource(HFDataset, Source):
    """A datasets.IterableDataset (see the module docstring); `buffer` is the shuffle buffer's size."""

    kind = "IterableDataset"

    def __init__(self, dataset: Any, *, shuffle: bool = False, buffer: int = 1000, rank: int | None = None,
                 world_size: int | None = None):
        super().__init__(dataset, shuffle, rank, world_size)
        self.buffer = int(buffer)

    def open(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> HFIterating:
        from datasets.distributed import split_dataset_by_node  # the caller's datasets, already imported

        index, count = self.portion(worker, num_workers)
        dataset = split_dataset_by_node(self.dataset, rank=index, world_size=count)  # a new object, even for 1
        if self.shuffle:
            dataset = dataset.shuffle(seed=seed, buffer_size=self.buffer)
            dataset.set_epoch(epoch)
        return HFIterating(dataset)
