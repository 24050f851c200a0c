"""Tar-shard datasets: the public facade of the shards layer.

    samples(urls, ...)          raw samples {"__key__", "__url__", ext: bytes} in shard order
    ShardDataset(urls, ...)     iterable dataset: shard shuffle, node/worker split, shuffle buffer,
                                epochs / resampling, decoding, len() from declared sizes, resumable state
    decode_sample / encode_sample / to_tuple    fields by extension (see tensorcom.shards.fields)
    TarWriter / ShardWriter     writers (see tensorcom.shards.writers)
    reraise_exception / warn_and_continue / ignore_and_continue   bad-data policies for handler=

URL specs are described in tensorcom.shards.shardlist, opening in tensorcom.shards.gopen, parsing in tensorcom.shards._tarstream.
"""

from __future__ import annotations

import itertools
import random
from typing import Any, Callable, Iterable, Iterator, Sequence

from tensorcom.errors import SampleError, ShardError
from tensorcom.shards._tarstream import shard_samples
from tensorcom.shards.fields import (
    IMAGE_MODES,
    decode_image,
    decode_sample,
    encode_sample,
)
from tensorcom.shards.handlers import (
    Handler,
    SkipCounts,
    handle,
    ignore_and_continue,
    reraise_exception,
    warn_and_continue,
)
from tensorcom.shards.shardlist import (
    epoch_rng,
    epoch_shards,
    expand_urls,
    node_and_world,
    resampled_shards,
    split_shards,
    worker_and_count,
)
from tensorcom.shards.writers import ShardWriter, TarWriter

__all__ = [
    "ShardDataset", "ShardWriter", "SkipCounts", "TarWriter", "decode_image", "decode_sample",
    "encode_sample", "expand_urls", "ignore_and_continue", "reraise_exception", "samples", "to_tuple",
    "warn_and_continue",
]


def samples(urls: str | Sequence[str], *, handler: Handler | None = None, shuffle_shards: bool = False,
            seed: int = 0, epoch: int = 0, rank: int | None = None, world_size: int | None = None,
            worker: int | None = None, num_workers: int | None = None, counts: SkipCounts | None = None,
            **open_options: Any) -> Iterator[dict[str, Any]]:
    """Raw samples of this node's and worker's shards of `urls`, shard after shard.

    Each sample is {"__key__": str, "__url__": str, ext: bytes}. `handler` (default: raise) decides what
    a bad shard or sample does (a truncated or empty shard is bad: see `require_end_blocks` in
    tarstream.shard_samples); skips are counted in `counts`. `open_options` go to shard_samples
    (require_end_blocks) and gopen (timeout, retries, endpoint_url, ...). Node split from rank/world_size or RANK/WORLD_SIZE; worker split from
    worker/num_workers or the running torch DataLoader worker.
    """
    rank, world_size = node_and_world(rank, world_size)
    worker, num_workers = worker_and_count(worker, num_workers)
    shard_list = epoch_shards(expand_urls(urls), shuffle=shuffle_shards, seed=seed, epoch=epoch,
                              rank=rank, world_size=world_size, worker=worker, num_workers=num_workers)
    for url in shard_list:
        yield from shard_samples(url, handler=handler, counts=counts, **open_options)


def to_tuple(sample: dict[str, Any], *fields: str) -> tuple:
    """The values of `fields` in order; a field "jpg;png" takes the first alternative present, and a
    single argument "jpg;png cls" is split on spaces. Raises SampleError naming the missing field."""
    if len(fields) == 1 and " " in fields[0].strip():
        fields = tuple(fields[0].split())
    if not fields:
        raise ValueError("to_tuple needs at least one field name")
    result = []
    for field in fields:
        for name in field.split(";"):
            if name in sample:
                result.append(sample[name])
                break
        else:
            present = sorted(k for k in sample if not k.startswith("__"))
            raise SampleError(f"sample {sample.get('__key__')!r} has no field {field!r} (has {present})",
                              url=sample.get("__url__"))
    return tuple(result)


def shuffle_buffer(items: Iterable[Any], size: int, rng: random.Random) -> Iterator[Any]:
    """Items in an order randomized through a buffer of `size` (the same rng → the same order)."""
    buffer: list[Any] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        index = rng.randrange(size)
        yield buffer[index]
        buffer[index] = item
    rng.shuffle(buffer)
    yield from buffer


def _normalize_sizes(sizes: int | Sequence[int] | None, count: int) -> list[int] | None:
    if sizes is None:
        return None
    if isinstance(sizes, int):
        if sizes < 0:
            raise ValueError(f"sizes must be >= 0, not {sizes}")
        return [sizes] * count
    sizes = [int(n) for n in sizes]
    if len(sizes) != count:
        raise ValueError(f"sizes has {len(sizes)} entries for {count} shards")
    return sizes


class ShardDataset:
    """An iterable dataset of tar-shard samples (raw bytes, or decoded with `decode`).

    One iteration runs `epochs` epochs (None: forever) starting at the epoch of set_epoch(); each epoch
    reads this node's and worker's shards (shuffled from (seed, epoch) when shuffle_shards), or with
    resampled=True as many shards drawn at random with replacement. `shuffle_buffer` > 0 mixes samples
    through a seeded buffer. `decode`: None (bytes), an image mode ("rgb8", "rgb", "l8", "pil", ...) for
    decode_sample, or a callable taking and returning a sample. `sizes` (samples per shard: int or list)
    enables len(). state_dict() / load_state_dict() resume an epoch exactly after the samples already
    yielded by this process's last iterator. Skipped bad data is counted in `skipped`.
    """

    def __init__(self, urls: str | Sequence[str], *, shuffle_shards: bool = False, shuffle_buffer: int = 0,
                 seed: int = 0, epochs: int | None = 1, resampled: bool = False,
                 sizes: int | Sequence[int] | None = None, handler: Handler | None = None,
                 decode: str | Callable[[dict], dict] | None = None, allow_pickle: bool = False,
                 rank: int | None = None, world_size: int | None = None, worker: int | None = None,
                 num_workers: int | None = None, **open_options: Any):
        self.urls = expand_urls(urls)
        if epochs is not None and epochs < 1:
            raise ValueError(f"epochs must be >= 1 or None, not {epochs}")
        if shuffle_buffer < 0:
            raise ValueError(f"shuffle_buffer must be >= 0, not {shuffle_buffer}")
        if isinstance(decode, str) and decode not in IMAGE_MODES:
            raise ValueError(f"decode must be None, a callable or one of {sorted(IMAGE_MODES)}: {decode!r}")
        self.shuffle_shards, self.buffer_size, self.seed = shuffle_shards, shuffle_buffer, seed
        self.epochs, self.resampled, self.sizes = epochs, resampled, _normalize_sizes(sizes, len(self.urls))
        self.handler, self.decode, self.allow_pickle = handler, decode, allow_pickle
        self.node = (rank, world_size)
        self.worker = (worker, num_workers)
        self.open_options = open_options
        self.skipped = SkipCounts()
        self.epoch = 0
        self._state = {"first": 0, "epoch": 0, "seen": 0, "shard": 0, "in_shard": 0}
        self._resume: dict[str, int] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at `epoch` (from its first sample)."""
        self.epoch, self._resume = int(epoch), None
        self._state = {"first": self.epoch, "epoch": self.epoch, "seen": 0, "shard": 0, "in_shard": 0}

    def state_dict(self) -> dict[str, int]:
        """Where the latest iterator stands: the epoch it started at ("first"), its current epoch, samples
        yielded in that epoch, and (without a shuffle buffer) the shard index and position in it."""
        return dict(self._state, seed=self.seed, shards=len(self.urls))

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Make the next iteration continue after what `state` (from state_dict) had yielded."""
        if state.get("seed", self.seed) != self.seed or state.get("shards", len(self.urls)) != len(self.urls):
            raise ValueError(f"state {state} belongs to a dataset with another seed or shard list")
        self._state = {k: int(state[k]) for k in ("first", "epoch", "seen", "shard", "in_shard")}
        self.epoch, self._resume = self._state["epoch"], dict(self._state)

    def __len__(self) -> int:
        if self.sizes is None:
            raise TypeError("len() of a ShardDataset needs sizes= (samples per shard)")
        if self.epochs is None:
            raise TypeError("len() of a ShardDataset that runs forever (epochs=None)")
        rank, world_size = node_and_world(*self.node)
        total = 0
        for epoch in range(self.epoch, self.epoch + self.epochs):
            if self.resampled:
                if len(set(self.sizes)) > 1:
                    raise TypeError("len() of a resampled ShardDataset needs one size for all shards")
                total += self.sizes[0] * len(split_shards(self.urls, rank, world_size))
                continue
            order = epoch_shards(range(len(self.urls)), shuffle=self.shuffle_shards, seed=self.seed,
                                 epoch=epoch, rank=rank, world_size=world_size, worker=0, num_workers=1)
            total += sum(self.sizes[i] for i in order)
        return total

    def _shard_sequence(self, epoch: int, rank: int, world_size: int, worker: int,
                        num_workers: int) -> Iterator[str]:
        if self.resampled:
            count = len(split_shards(self.urls, rank, world_size, worker, num_workers))
            return resampled_shards(self.urls, seed=self.seed, epoch=epoch, rank=rank, worker=worker,
                                    count=count)
        return iter(epoch_shards(self.urls, shuffle=self.shuffle_shards, seed=self.seed, epoch=epoch,
                                 rank=rank, world_size=world_size, worker=worker, num_workers=num_workers))

    def _raw_epoch(self, epoch: int, split: tuple[int, int, int, int], start_shard: int,
                   skip_in_shard: int) -> Iterator[dict[str, Any]]:
        shards = itertools.islice(self._shard_sequence(epoch, *split), start_shard, None)
        for index, url in enumerate(shards, start_shard):
            stream = shard_samples(url, handler=self.handler, counts=self.skipped, **self.open_options)
            position = skip_in_shard if index == start_shard else 0
            for position, sample in enumerate(itertools.islice(stream, position, None), position + 1):
                if not self.buffer_size:
                    self._state.update(shard=index, in_shard=position)
                yield sample

    def _decoded(self, sample: dict[str, Any]) -> dict[str, Any] | None:
        if self.decode is None:
            return sample
        try:
            if callable(self.decode):
                return self.decode(sample)
            return decode_sample(sample, image=self.decode, allow_pickle=self.allow_pickle)
        except ShardError as exn:
            handle(exn, self.handler, self.skipped, "samples")
            return None

    def _epoch(self, epoch: int, first: int, split: tuple[int, int, int, int]) -> Iterator[dict[str, Any]]:
        resume, self._resume = self._resume, None
        if resume is None or resume["epoch"] != epoch:
            resume = {"epoch": epoch, "seen": 0, "shard": 0, "in_shard": 0}
        self._state = dict(resume, first=first)
        if self.buffer_size:  # replay the epoch's buffered order and drop what was already yielded
            rng = epoch_rng(self.seed, epoch, split[0], split[2], 1)
            stream = shuffle_buffer(self._raw_epoch(epoch, split, 0, 0), self.buffer_size, rng)
            stream = itertools.islice(stream, resume["seen"], None)
        else:
            stream = self._raw_epoch(epoch, split, resume["shard"], resume["in_shard"])
        for sample in stream:
            self._state["seen"] += 1
            decoded = self._decoded(sample)
            if decoded is not None:
                yield decoded

    def as_torch(self) -> Any:
        """This dataset as a torch.utils.data.IterableDataset (imports torch), for DataLoader: each
        DataLoader worker then reads its own share of the shards."""
        from tensorcom._torch_dataset import as_iterable_dataset

        return as_iterable_dataset(self)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        rank, world_size = node_and_world(*self.node)
        worker, num_workers = worker_and_count(*self.worker)
        split = (rank, world_size, worker, num_workers)
        first = self._resume["first"] if self._resume else self.epoch  # a resumed run keeps its end
        epochs = itertools.count(self.epoch) if self.epochs is None else range(self.epoch, first + self.epochs)
        for epoch in epochs:
            yield from self._epoch(epoch, first, split)
            self._state = {"first": first, "epoch": epoch + 1, "seen": 0, "shard": 0, "in_shard": 0}
        self.epoch = self._state["epoch"]
        self._state["first"] = self.epoch
