"""Shard lists: URL specs → lists of shard URLs; shuffling, splitting across nodes and workers, resampling.

Splitting happens here and only here (`split_index`); the pipeline passes its worker portion down.

Spec grammar (strings): `A::B` joins specs; each part is brace-expanded (`train-{000000..000146}.tar`)
or uses the count shorthand `train-@000147.tar` (147 shards numbered from 0 with 6 digits). Lists and
tuples of specs are expanded element by element. Order: shuffle (same on every node: seed + epoch),
then node split (rank::world_size), then worker split (worker::num_workers), so every shard of an epoch
goes to exactly one (node, worker).
"""

from __future__ import annotations

import os
import random
import re
import sys
from typing import Any, Sequence

import braceexpand
import numpy as np

from tensorcom import settings
from tensorcom.wire import strided

_COUNT = re.compile(r"^(.*)@(\d+)([^/@]*)$")


def _expand_one(spec: str) -> list[str]:
    match = _COUNT.match(spec)
    if match and not spec.startswith("pipe:") and "{" not in spec:
        head, digits, tail = match.groups()
        return [f"{head}{i:0{len(digits)}d}{tail}" for i in range(int(digits))]
    return list(braceexpand.braceexpand(spec))


def expand_urls(spec: str | os.PathLike | Sequence[Any]) -> list[str]:
    """The list of shard URLs that `spec` names (see the module docstring); ValueError if none."""
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if isinstance(spec, str):
        urls = [url for part in spec.split("::") if part for url in _expand_one(part)]
    elif isinstance(spec, (list, tuple)):
        urls = [url for item in spec for url in expand_urls(item)]
    else:
        raise TypeError(f"shard URLs must be a str, path or list of them, not {type(spec).__name__}")
    if not urls:
        raise ValueError(f"no shard URLs in {spec!r}")
    return urls


def epoch_rng(seed: int, epoch: int, *salt: int) -> random.Random:
    """A Random seeded from (seed, epoch, *salt): the same arguments always give the same stream."""
    return random.Random(":".join(str(int(x)) for x in (seed, epoch, *salt)))


def epoch_order(count: int, shuffle: bool, seed: int, epoch: int) -> np.ndarray | range:
    """Indices 0..count-1, permuted by a Generator seeded with (seed, epoch) when `shuffle`: the one
    per-epoch order of shards, files and any other indexed source."""
    if not shuffle:
        return range(count)
    return np.random.default_rng([seed, epoch, 0x5EED]).permutation(count)


def shuffle_shards(urls: Sequence[str], seed: int, epoch: int) -> list[str]:
    """`urls` in the `epoch_order` of (seed, epoch)."""
    return [urls[i] for i in epoch_order(len(urls), True, seed, epoch)]


def node_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world_size) from the arguments, else from settings.rank_and_world_size()."""
    if rank is None and world_size is None:
        return settings.rank_and_world_size()
    return _member(rank, world_size, ("rank", "world_size"), f"rank {rank} is not a node of a world of size {world_size}")


def worker_and_count(worker: int | None, num_workers: int | None) -> tuple[int, int]:
    """(worker, num_workers) from the arguments, else from a running torch DataLoader worker (only
    when torch is already imported), else (0, 1)."""
    if worker is None and num_workers is None:
        torch_data = sys.modules.get("torch.utils.data")
        info = torch_data.get_worker_info() if torch_data is not None else None
        return (info.id, info.num_workers) if info is not None else (0, 1)
    return _member(worker, num_workers, ("worker", "num_workers"), f"worker {worker} is not one of {num_workers} workers")


def _member(index: int | None, count: int | None, names: tuple[str, str], outside: str) -> tuple[int, int]:
    """(index, count) when both are given and 0 <= index < count; else ValueError: `names` the two
    arguments when one is missing, the message `outside` when the index is not one of count."""
    if index is None or count is None:
        raise ValueError(f"give both {names[0]} and {names[1]}, or neither (got {index!r}, {count!r})")
    if count < 1 or not 0 <= index < count:
        raise ValueError(outside)
    return int(index), int(count)


def split_index(rank: int, world_size: int, worker: int, num_workers: int) -> tuple[int, int]:
    """The one split of a list between nodes and their workers: (portion index, number of portions).

    Portion `rank + world_size * worker` of `world_size * num_workers` is, taken as a stride, the same as
    worker `worker`'s stride of node `rank`'s stride, so every item goes to exactly one (node, worker).
    """
    return rank + world_size * worker, world_size * num_workers


def split_shards(urls: Sequence[str], rank: int, world_size: int, worker: int = 0,
                 num_workers: int = 1) -> list[str]:
    """The shards of node `rank` and, within it, of `worker`: every shard goes to exactly one pair.
    ValueError naming rank, world size, worker and shard count when that portion is empty."""
    index, count = split_index(rank, world_size, worker, num_workers)
    chosen = strided(list(urls), index, count)
    if not chosen:
        who = f"rank {rank} of world size {world_size}" + (
            f", worker {worker} of {num_workers}" if num_workers > 1 else "")
        raise ValueError(f"{who} gets none of the {len(urls)} shards: use at most {len(urls)} "
                         f"nodes x workers in all, or split the data into more shards")
    return chosen


def epoch_shards(urls: Sequence[str], *, shuffle: bool, seed: int, epoch: int, rank: int,
                 world_size: int, worker: int, num_workers: int, resampled: bool = False) -> list[str]:
    """This (node, worker)'s shards for `epoch`: its split of `urls`, shuffled first from (seed, epoch)
    when `shuffle`; or, when `resampled`, as many shards as that split holds drawn at random with
    replacement from all of `urls`, the draw depending on (seed, epoch, portion index)."""
    if resampled:
        count = len(split_shards(urls, rank, world_size, worker, num_workers))
        rng = epoch_rng(seed, epoch, split_index(rank, world_size, worker, num_workers)[0])
        return [rng.choice(list(urls)) for _ in range(count)]
    ordered = shuffle_shards(urls, seed, epoch) if shuffle else list(urls)
    return split_shards(ordered, rank, world_size, worker, num_workers)
