"""`tensorcom prepare`: fill a decoded-image cache ahead of training.

    tensorcom prepare DIR_OR_SHARDS --cache CACHE [--cache-max-side N] [--cache-max-bytes B] [-w W] [-q]

DIR_OR_SHARDS is what serve-imagenet-dir (-d: an ImageFolder tree, DIR/train when that exists) or
serve-imagenet-shards (-u: brace-expanded shard URLs) reads; with the same --cache options those
servers then map every image from CACHE instead of decoding it (tensorcom.images.decoded_cache). W
worker processes (default: one per CPU) decode disjoint parts; a progress line counts the images.
Resumable: an image whose entry is already there is skipped (counted "already there"), so an
interrupted run continues where it stopped; what this host's killed writers left unindexed in their
segments is cut off first. The last line says how many were stored, already there, and did not fit
under --cache-max-bytes.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter

from tensorcom.cli.common import Parser, add_quiet_argument, entry_point, nonnegative_int, positive_int
from tensorcom.cli.shard import byte_size
from tensorcom.pipeline import Pipeline
from tensorcom.progress import Progress


def add_cache_arguments(parser: argparse.ArgumentParser, required: bool = False) -> None:
    """--cache DIR, --cache-max-side N, --cache-max-bytes B (dests cache, cache_max_side, cache_max_bytes)."""
    parser.add_argument("--cache", required=required, metavar="DIR",
                        help="decoded-image cache directory (docs/pipeline.md, 'Caching decoded images')")
    parser.add_argument("--cache-max-side", type=positive_int, default=None, metavar="N",
                        help="store images with their shorter side at most N (a DCT-scaled decode, then a resize)")
    parser.add_argument("--cache-max-bytes", type=byte_size, default=None, metavar="B",
                        help="store at most B bytes (500G, 3e11); what does not fit is decoded every epoch")


def cache_options(args: argparse.Namespace) -> dict:
    """The cache= keywords of images.imagenet's pipelines from parsed add_cache_arguments options."""
    max_bytes = None if args.cache_max_bytes is None else int(args.cache_max_bytes)
    return dict(cache=args.cache, cache_max_side=args.cache_max_side, cache_max_bytes=max_bytes)


def outcome(sample: dict) -> str:
    """What the cache stage did with a sample: "hit", "stored" or "full" (only this crosses back)."""
    return sample["__cache__"]


def fill(source: str, args: argparse.Namespace) -> Pipeline:
    """The pipeline that fills the cache: `source`'s samples through Pipeline.cache, in -w processes."""
    from tensorcom.images.folder import ImageFolderSource
    from tensorcom.images.imagenet import dataset_root
    from tensorcom.pipeline.sources import ShardSource

    if os.path.isdir(source):
        origin = ImageFolderSource(dataset_root(source), read=False)
        origin.items()  # scanned once, here
    else:
        origin = ShardSource(source)
    options = cache_options(args)
    pipeline = Pipeline(origin).cache(options["cache"], max_side=options["cache_max_side"],
                                      max_bytes=options["cache_max_bytes"]).map(outcome)
    return pipeline.parallel(args.workers) if args.workers > 0 else pipeline


@entry_point
def main(argv: list[str] | None = None) -> int:
    """tensorcom prepare: decode every image of a folder or shards into a cache; prints the counts."""
    parser = Parser(prog="tensorcom prepare", description="Fill a decoded-image cache ahead of training.")
    parser.add_argument("source", help="ImageFolder directory (DIR/train when present) or shard URLs")
    add_cache_arguments(parser, required=True)
    parser.add_argument("-w", "--workers", type=nonnegative_int, default=os.cpu_count() or 1,
                        help="decoding processes (default: one per CPU; 0: in this process)")
    add_quiet_argument(parser, "progress")
    args = parser.parse_args(argv)
    counts: Counter = Counter()
    pipeline = fill(args.source, args)
    stale = pipeline.steps[0].args["fn"].remove_stale()
    with Progress("tensorcom prepare", unit="images", enabled=not args.quiet) as shown:
        for done in pipeline:
            counts[done] += 1
            shown.update(1, stored=counts["stored"])
    print(f"{sum(counts.values())} images: {counts['stored']} stored, {counts['hit']} already there, "
          f"{counts['full']} did not fit" + (f"; {stale} segments of killed writers cut" if stale else ""))
    return 0
