"""Sources: where a Pipeline's samples come from, split disjointly between workers, ordered per epoch.

A source has `open(*, seed, epoch, worker, num_workers)`, returning a node (tensorcom.pipeline._node:
an iterator with state_dict / load_state_dict) over its portion (`worker` of `num_workers`) of the
samples of that epoch, and `length(worker, num_workers)`, the size of that portion or None when unknown.
A source written for an earlier version may implement `iterate(...)` (any iterator) instead: it is
then resumed by iterating again and skipping. Every source is picklable when what it was built from
is, so a Pipeline can be sent to a spawned process.

    IterableSource(items)          any re-iterable (list, range, dataset...); portions are strides
    ShardSource(urls, ...)         tar shards read by tensorcom.shards.ShardReader; portions are whole shards
    PathSource(paths, ...)         files or URLs read with gopen: {"__key__", "__url__", EXT: bytes}
    FetchSource(urls, threads=8)   like PathSource, the reads done by a thread pool (HTTP downloads)

ImageFolder trees are a source of the images layer: `tensorcom.images.ImageFolderSource`.
Every source takes `shuffle=True` for a fresh order each epoch, a pure function of (seed, epoch)
(of the items, or of the shards); it is applied before the split, so the portions stay disjoint.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Iterator, Sequence

from tensorcom.pipeline._node import Indexed, Node, Replayed
from tensorcom.pipeline._pooled import MapPlan, WorkerMapped
from tensorcom.shards import OPEN_OPTIONS, ShardReader, SkipCounts
from tensorcom.checks import near_misses, renamed_option
from tensorcom.shards.shardlist import epoch_order, epoch_shards, expand_urls, node_and_world, split_shards
from tensorcom.wire import strided


class Source:
    """Base class: subclasses implement `open` (or, for older ones, `iterate`) and, when they can, `length`."""

    def open(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Node:
        """This worker's samples for `epoch`, as a node positioned at the first one."""
        return Replayed(lambda: self.iterate(seed=seed, epoch=epoch, worker=worker, num_workers=num_workers))

    def iterate(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Iterator[Any]:
        """This worker's samples for `epoch` (for sources that implement `open`: the same node)."""
        if type(self).open is Source.open:
            raise NotImplementedError(f"{type(self).__name__} implements neither open() nor iterate()")
        return self.open(seed=seed, epoch=epoch, worker=worker, num_workers=num_workers)

    def length(self, worker: int = 0, num_workers: int = 1) -> int | None:
        """Number of samples in this worker's portion, or None when unknown."""
        return None


def portion_length(total: int, worker: int, num_workers: int) -> int:
    """Size of stride `worker` of `num_workers` over `total` items."""
    return len(strided(range(total), worker, num_workers))


def portion_order(count: int, shuffle: bool, seed: int, epoch: int, worker: int, num_workers: int) -> Sequence[int]:
    """The indices of portion `worker` of `num_workers` of `count` items, in `epoch_order` for (seed, epoch)."""
    return strided(epoch_order(count, shuffle, seed, epoch), worker, num_workers)


def epoch_portion(items: Sequence[Any], shuffle: bool, seed: int, epoch: int, worker: int,
                  num_workers: int, read: Callable[[Any], Any] | None = None) -> Indexed:
    """The items of portion `worker` of `num_workers` of a sequence, in `epoch_order` for (seed, epoch),
    each passed through `read` when given."""
    return Indexed(items, portion_order(len(items), shuffle, seed, epoch, worker, num_workers), read)


# the old names of the three above, kept for sources written against them
share_length, share_order, epoch_share = portion_length, portion_order, epoch_portion


def _is_sequence(items: Any) -> bool:
    return hasattr(items, "__getitem__") and hasattr(items, "__len__") and not isinstance(items, dict)


class IterableSource(Source):
    """Any iterable that can be iterated once per epoch (lists, ranges, datasets); a one-shot
    iterator (a generator) works for a single epoch and cannot be resumed. A sequence resumes at its
    position without touching the items before; `shuffle=True` needs a sequence."""

    def __init__(self, items: Iterable[Any], *, shuffle: bool = False):
        if not hasattr(items, "__iter__"):
            raise TypeError(f"a source must be iterable, got {type(items).__name__}: {items!r}")
        if shuffle and not _is_sequence(items):
            raise TypeError(f"shuffle=True needs a sequence (len and indexing), got {type(items).__name__}")
        self.items = items
        self.shuffle = shuffle

    def open(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Node:
        if _is_sequence(self.items):
            return epoch_portion(self.items, self.shuffle, seed, epoch, worker, num_workers)
        return Replayed(lambda: strided(self.items, worker, num_workers))

    def length(self, worker: int = 0, num_workers: int = 1) -> int | None:
        try:
            return portion_length(len(self.items), worker, num_workers)
        except TypeError:
            return None


SHARD_OPTIONS = ("shuffle", "resampled", "rank", "world_size", "handler", "counts", *OPEN_OPTIONS)


class ShardSource(Source):
    """Samples of tar shards {"__key__", "__url__", ext: bytes}; each worker reads whole shards.

    `shuffle` orders the shards from (seed, epoch) each epoch (`shuffle_shards=` is its deprecated
    spelling); `resampled` draws as many shards at random with replacement instead. The node split
    comes from rank/world_size or RANK/WORLD_SIZE, checked here: a node without shards is a
    ValueError naming rank, world size and shard count. `handler` and `counts` as for
    tensorcom.shards.samples; other options go to the shard reader and gopen (a misspelled one is a
    TypeError with "did you mean").
    """

    def __init__(self, urls: str | Sequence[str], *, shuffle: bool | None = None, resampled: bool = False,
                 rank: int | None = None, world_size: int | None = None, handler: Any = None,
                 counts: SkipCounts | None = None, shuffle_shards: bool | None = None, **open_options: Any):
        self.shuffle = bool(renamed_option(shuffle, shuffle_shards, "shuffle", "shuffle_shards", "ShardSource"))
        near_misses("ShardSource", open_options, SHARD_OPTIONS)
        self.urls = expand_urls(urls)
        self.rank, self.world_size = node_and_world(rank, world_size)
        split_shards(self.urls, self.rank, self.world_size)  # an empty node split fails now
        self.resampled, self.handler, self.counts, self.open_options = resampled, handler, counts, open_options

    def open(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Node:
        shards = epoch_shards(self.urls, shuffle=self.shuffle, seed=seed, epoch=epoch, rank=self.rank,
                              world_size=self.world_size, worker=worker, num_workers=num_workers,
                              resampled=self.resampled)
        return ShardReader(shards, handler=self.handler, counts=self.counts, **self.open_options)


def read_bytes(url: str) -> bytes:
    """The whole content of a path or URL, read with tensorcom.shards.gopen."""
    from tensorcom.shards.gopen import gopen

    with gopen(url) as stream:
        return stream.read()


def field_name(path: str) -> str:
    """The sample field for a file: its extension, lowercased ("jpg"), or "data" when it has none."""
    base = str(path).rsplit("/", 1)[-1]
    ext = base.rsplit(".", 1)[-1].lower() if "." in base.lstrip(".") else ""
    return ext or "data"


def path_sample(url: str, read: bool) -> dict:
    """{"__key__": url, "__url__": url} plus the content under its field name when `read`."""
    sample: dict[str, Any] = {"__key__": str(url), "__url__": str(url)}
    if read:
        sample[field_name(url)] = read_bytes(str(url))
    return sample


class PathSource(Source):
    """A list of paths or URLs; each sample is {"__key__": url, "__url__": url, EXT: bytes}.

    With `read=False` the bytes are left out, e.g. to read them later in a parallel `map`.
    """

    def __init__(self, paths: Sequence[str | os.PathLike], *, read: bool = True, shuffle: bool = False):
        if isinstance(paths, (str, bytes)):
            raise TypeError(f"PathSource takes a list of paths or URLs, not one string: {paths!r}")
        self.paths = [os.fspath(p) for p in paths]
        self.read = read
        self.shuffle = shuffle

    def _urls(self, seed: int, epoch: int, worker: int, num_workers: int) -> Indexed:
        return epoch_portion(self.paths, self.shuffle, seed, epoch, worker, num_workers, read=self._sample)

    def _sample(self, url: str) -> dict:
        return path_sample(url, self.read)

    def open(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Node:
        return self._urls(seed, epoch, worker, num_workers)

    def length(self, worker: int = 0, num_workers: int = 1) -> int | None:
        return portion_length(len(self.paths), worker, num_workers)


class FetchSource(PathSource):
    """PathSource whose reads run on `threads` threads at once (for HTTP); `ordered=False` yields
    samples as their downloads finish. A failed read raises WorkerError naming the URL."""

    def __init__(self, urls: Sequence[str], *, threads: int = 8, ordered: bool = True, shuffle: bool = False):
        super().__init__(urls, read=False, shuffle=shuffle)  # {"__key__": url} first; the threads read
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads!r}")
        self.threads = threads
        self.ordered = ordered

    def _sample(self, url: str) -> dict:
        return {"__key__": url}  # keyed, so that a failed read's WorkerError names its URL

    def open(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Node:
        plan = MapPlan(workers=self.threads, ordered=self.ordered, buffer=2 * self.threads)
        return WorkerMapped(self._urls(seed, epoch, worker, num_workers), _fetch_keyed, plan)


def _fetch_keyed(sample: dict) -> dict:
    """path_sample of the URL under `__key__`, with its bytes read."""
    return path_sample(sample["__key__"], True)
