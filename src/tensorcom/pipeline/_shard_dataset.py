"""`ShardDataset`: the shortcut that builds the usual pipeline over tar shards (one model, not two).

    ShardDataset(urls, shuffle=True, shuffle_buffer=1000, decode="rgb8", epochs=1, ...)
      is Pipeline(ShardSource(urls, shuffle=True, ...), seed=seed)
             .shuffle(1000)                  when shuffle_buffer > 0
             .decode("rgb8", handler=...)    when decode is given (a callable: a map that may skip)
             + `epochs` consecutive epochs    (a repeat whose passes are epochs e, e + 1, ...)

so `Pipeline(ds).batch(64)` continues it, DataLoader workers split it once (Pipeline.__iter__), and
its state is the pipeline's. Kept for its users with the arguments it always had; `tensorcom.shards`
reaches it by name.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from tensorcom.pipeline._fieldstages import SampleDecoder, kept
from tensorcom.pipeline._pipeline import Pipeline, _non_negative, _positive, deprecated_as_torch
from tensorcom.pipeline.sources import ShardSource
from tensorcom.shards import OPEN_OPTIONS, SkipCounts
from tensorcom.checks import near_misses, renamed_option
from tensorcom.shards.handlers import Handler
from tensorcom.shards.shardlist import epoch_shards, split_shards

_OPTIONS = ("shuffle", "shuffle_buffer", "seed", "epochs", "resampled", "sizes", "handler", "decode",
            "allow_pickle", "rank", "world_size", "worker", "num_workers", *OPEN_OPTIONS)


def _normalize_sizes(sizes: int | Sequence[int] | None, count: int) -> list[int] | None:
    if sizes is None:
        return None
    if isinstance(sizes, int):
        if sizes < 0:
            raise ValueError(f"sizes must be >= 0, got {sizes!r}")
        return [sizes] * count
    sizes = [int(n) for n in sizes]
    if len(sizes) != count:
        raise ValueError(f"sizes has {len(sizes)} entries for {count} shards")
    return sizes


class ShardDataset:
    """An iterable dataset of tar-shard samples (raw bytes, or decoded with `decode`).

    One iteration runs `epochs` epochs (None: forever) starting at the epoch of set_epoch(); each epoch
    reads this node's and worker's shards (shuffled from (seed, epoch) with `shuffle`; `shuffle_shards`
    is its deprecated spelling), or with resampled=True as many shards drawn at random with
    replacement. `shuffle_buffer` > 0 mixes samples through the pipeline's shuffle buffer. `decode`:
    None (bytes), an image mode ("rgb8", "rgb", "l8", "pil", ...) or a callable taking and returning a
    sample. `sizes` (samples per shard: int or list) enables len(). state_dict() / load_state_dict()
    resume exactly after the samples already yielded. Skipped bad data is counted in `skipped`.
    Options are checked here: a misspelled one is a TypeError with "did you mean", a node without
    shards a ValueError naming rank, world size and shard count.
    """

    def __init__(self, urls: str | Sequence[str], *, shuffle: bool | None = None, shuffle_buffer: int = 0,
                 seed: int = 0, epochs: int | None = 1, resampled: bool = False,
                 sizes: int | Sequence[int] | None = None, handler: Handler | None = None,
                 decode: str | Callable[[dict], dict] | None = None, allow_pickle: bool = False,
                 rank: int | None = None, world_size: int | None = None, worker: int | None = None,
                 num_workers: int | None = None, shuffle_shards: bool | None = None, **open_options: Any):
        shuffle = renamed_option(shuffle, shuffle_shards, "shuffle", "shuffle_shards", "ShardDataset")
        near_misses("ShardDataset", open_options, _OPTIONS)
        if epochs is not None:
            _positive("epochs", epochs)
        if decode is not None and not isinstance(decode, str) and not callable(decode):
            raise TypeError(f"decode must be None, an image mode or a callable, not {decode!r}")
        self.skipped = SkipCounts()
        self.source = ShardSource(urls, shuffle=shuffle, resampled=resampled, rank=rank, world_size=world_size,
                                  handler=handler, counts=self.skipped, **open_options)
        self.urls, self.seed, self.epochs, self.resampled = self.source.urls, seed, epochs, resampled
        self.sizes = _normalize_sizes(sizes, len(self.urls))
        self.pipeline = self._build(shuffle_buffer, decode, handler, allow_pickle, worker, num_workers)
        self.epoch = 0

    def _build(self, buffer: int, decode: Any, handler: Handler | None, allow_pickle: bool,
               worker: int | None, num_workers: int | None) -> Pipeline:
        _non_negative("shuffle_buffer", buffer)
        p = Pipeline(self.source, seed=self.seed)
        p = p.shuffle(buffer) if buffer else p
        if isinstance(decode, str):
            p = p.decode(decode, handler=handler, counts=self.skipped, allow_pickle=allow_pickle)
        elif decode is not None:
            p = p.map(SampleDecoder(decode, handler, self.skipped))
            p = p.filter(kept) if handler is not None else p
        if self.epochs != 1:
            p = p._then("repeat", epochs=self.epochs, stride=1)  # passes are epochs e, e + 1, ...
        if worker is not None or num_workers is not None:
            if worker is None or num_workers is None:
                raise ValueError(f"give both worker and num_workers, or neither (got {worker!r}, {num_workers!r})")
            p = p.shard(worker, num_workers)
        return p

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at `epoch` (from its first sample)."""
        self.pipeline.set_epoch(epoch)
        self.epoch = self.pipeline.epoch

    def as_pipeline(self) -> Pipeline:
        """The pipeline this dataset iterates, at its current epoch (what Pipeline(dataset) continues)."""
        return self.pipeline._copy(epoch=self.epoch)

    def state_dict(self) -> dict[str, Any]:
        """The pipeline's state (Pipeline.state_dict) plus the number of shards."""
        return dict(self.pipeline.state_dict(), shards=len(self.urls))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next iteration continue after what `state` (from state_dict) had yielded;
        ValueError for a state of a dataset with another seed or shard list."""
        if state.get("shards", len(self.urls)) != len(self.urls):
            raise ValueError(f"the state is of a dataset of {state['shards']} shards, this one has {len(self.urls)}")
        self.pipeline.load_state_dict({k: v for k, v in state.items() if k != "shards"})
        self.epoch = self.pipeline.epoch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self.pipeline
        if self.epochs is not None:
            self.set_epoch(self.epoch + self.epochs)

    def __len__(self) -> int:
        if self.sizes is None:
            raise TypeError("len() of a ShardDataset needs sizes= (samples per shard)")
        if self.epochs is None:
            raise TypeError("len() of a ShardDataset that runs forever (epochs=None)")
        rank, world_size = self.source.rank, self.source.world_size
        if self.resampled:
            if len(set(self.sizes)) > 1:
                raise TypeError("len() of a resampled ShardDataset needs one size for all shards")
            return self.epochs * self.sizes[0] * len(split_shards(self.urls, rank, world_size))
        total = 0
        for epoch in range(self.epoch, self.epoch + self.epochs):
            order = epoch_shards(list(range(len(self.urls))), shuffle=self.source.shuffle, seed=self.seed,
                                 epoch=epoch, rank=rank, world_size=world_size, worker=0, num_workers=1)
            total += sum(self.sizes[i] for i in order)
        return total

    def handed_to_workers(self) -> None:
        """Note that this dataset is now iterated by a loader's worker processes (Pipeline.handed_to_workers)."""
        self.pipeline.handed_to_workers()

    def as_torch(self) -> Any:
        """Deprecated: `tensorcom.torch.iterable_dataset(dataset)` (each DataLoader worker then reads its
        own portion of the shards; torchdata's StatefulDataLoader saves each worker's position)."""
        return deprecated_as_torch(self)
