"""Tar-shard datasets: the public facade of the shards layer.

    samples(urls, ...)          raw samples {"__key__", "__url__", ext: bytes} in shard order (a ShardReader:
                                an iterator with state_dict() / load_state_dict())
    decode_sample / encode_sample               fields by extension (see tensorcom.shards.fields)
    to_tuple / find_field / pick_field          fields by name, "jpg;png" alternatives (tensorcom.fieldspec)
    TarWriter / ShardWriter     writers (see tensorcom.shards.writers)
    reraise_exception / warn_and_continue / ignore_and_continue   bad-data policies for handler=

The dataset shortcut over shards (shuffling, splitting, decoding, epochs, len, resume) builds a
Pipeline, so it lives in the pipeline layer: `tensorcom.ShardDataset` (= tensorcom.pipeline.ShardDataset).

URL specs are described in tensorcom.shards.shardlist, opening in tensorcom.shards.gopen, parsing
in tensorcom.shards._tarstream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from tensorcom.checks import near_misses, renamed_option
from tensorcom.fieldspec import find_field, parse_fields, pick_field, pick_fields
from tensorcom.lazy import lazy_names

if TYPE_CHECKING:
    from tensorcom.shards._reading import ShardReader
    from tensorcom.shards.handlers import Handler, SkipCounts

# name -> the submodule that defines it, imported on first use (PEP 562), so that importing one
# submodule (tensorcom.shards.fields in a worker process, say) does not import the readers and
# writers, and with them http.client, urllib.request and tarfile
_EXPORTS: dict[str, str] = {
    "Handler": "tensorcom.shards.handlers",
    "OPEN_OPTIONS": "tensorcom.shards._reading",
    "ShardReader": "tensorcom.shards._reading",
    "ShardWriter": "tensorcom.shards.writers",
    "SkipCounts": "tensorcom.shards.handlers",
    "TarWriter": "tensorcom.shards.writers",
    "decode_image": "tensorcom.shards.fields",
    "decode_sample": "tensorcom.shards.fields",
    "encode_sample": "tensorcom.shards.fields",
    "epoch_shards": "tensorcom.shards.shardlist",
    "expand_urls": "tensorcom.shards.shardlist",
    "ignore_and_continue": "tensorcom.shards.handlers",
    "node_and_world": "tensorcom.shards.shardlist",
    "reraise_exception": "tensorcom.shards.handlers",
    "warn_and_continue": "tensorcom.shards.handlers",
    "worker_and_count": "tensorcom.shards.shardlist",
}

__all__ = [
    "ShardReader", "ShardWriter", "SkipCounts", "TarWriter", "decode_image", "decode_sample",
    "encode_sample", "expand_urls", "find_field", "ignore_and_continue", "pick_field", "reraise_exception",
    "samples", "to_tuple", "warn_and_continue",
]

_SAMPLES_OPTIONS = ("handler", "shuffle", "seed", "epoch", "rank", "world_size", "worker", "num_workers",
                    "counts", "resampled")  # and the reader's OPEN_OPTIONS

__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)


def samples(urls: str | Sequence[str], *, handler: Handler | None = None, shuffle: bool | None = None,
            seed: int = 0, epoch: int = 0, rank: int | None = None, world_size: int | None = None,
            worker: int | None = None, num_workers: int | None = None, counts: SkipCounts | None = None,
            resampled: bool = False, shuffle_shards: bool | None = None, **open_options: Any) -> ShardReader:
    """Raw samples of this node's and worker's shards of `urls`, shard after shard.

    Each sample is {"__key__": str, "__url__": str, ext: bytes}. `shuffle` orders the shards from (seed,
    epoch) first (`shuffle_shards=` is its deprecated spelling); `resampled` draws as many shards at
    random instead. `handler` (default: raise) decides what a bad shard or sample does (a truncated or
    empty shard is bad: see `require_end_blocks` in tarstream.shard_samples); skips are counted in
    `counts`. `open_options` go to shard_samples (require_end_blocks) and gopen (timeout, retries,
    endpoint_url, ...). Node split from rank/world_size or RANK/WORLD_SIZE; worker split from
    worker/num_workers or the running torch DataLoader worker. Checked now, not when iterated: a
    misspelled option (TypeError, "did you mean") and an empty split (ValueError naming rank, world
    size and shard count).
    """
    from tensorcom.shards._reading import OPEN_OPTIONS, ShardReader
    from tensorcom.shards.shardlist import epoch_shards, expand_urls, node_and_world, worker_and_count

    shuffle = renamed_option(shuffle, shuffle_shards, "shuffle", "shuffle_shards", "samples()")
    near_misses("samples()", open_options, (*_SAMPLES_OPTIONS, *OPEN_OPTIONS))
    rank, world_size = node_and_world(rank, world_size)
    worker, num_workers = worker_and_count(worker, num_workers)
    shard_list = epoch_shards(expand_urls(urls), shuffle=bool(shuffle), seed=seed, epoch=epoch, rank=rank,
                              world_size=world_size, worker=worker, num_workers=num_workers, resampled=resampled)
    return ShardReader(shard_list, handler=handler, counts=counts, **open_options)


def to_tuple(sample: dict[str, Any], *fields: str) -> tuple:
    """The values of `fields` in order, as tensorcom.fieldspec parses them: "jpg;png" takes the first
    alternative present, "jpg;png cls" (or "jpg,cls") names two fields. SampleError naming a missing
    field (with its alternatives and the sample's key and URL); ValueError for no fields."""
    return pick_fields(sample, parse_fields(fields, "to_tuple"))
