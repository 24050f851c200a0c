"""`serve-imagenet-dir` and `serve-imagenet-shards`: serve augmented training batches, as tensorcom 0.1 did.

Both send `[images, labels]` batches: images uint8 (N, SIZE, SIZE, 3) (float32, ImageNet-normalized,
with `-n`), labels int32 (N,), augmented with RandomResizedCrop(SIZE) + horizontal flip.

    serve-imagenet-dir -d DIR -b 64 [-w WORKERS] [-P N] [-n] [-B] [--no-shuffle] [URL...]
    serve-imagenet-shards -u 'SHARD URLS' -b 64 [-w WORKERS] [-P N] [-n] [-B] [--shuffle] [URL...]

Options keep tensorcom 0.1's meanings: `-w` decoding workers inside each publisher (0.1: DataLoader
workers; new: `-w auto [--min-workers N] [--max-workers N]`, as many as keep the consumers fed, the
count changing as it runs and told on stderr, "map workers 3 (auto)"; docs/scaling.md), `-P N` N parallel publisher processes, each serving a disjoint part of the data (with one URL,
it must connect: zpush or zrpub, as in 0.1; with several URLs there is one publisher per URL), `-n`
normalize, `-B` serve one preloaded batch over and over (measures the transport alone). Both take
`--shuffle/--no-shuffle` (the directory server shuffles by default, the shard server does not); 0.1's
`-S`, which meant no-shuffle in one and shuffle in the other, is refused with a line saying so. The
default URL is zpub://127.0.0.1:7880. DIR is DIR/train when that exists (0.1's layout), else DIR itself.

New: `--size` (default 224), `--min-scale` (smallest crop area, default 0.08), `--epochs E` (default 0:
forever; an end-of-epoch marker per portion after each), `--count N` (stop after about N batches),
`--seed`, `--cache DIR [--cache-max-side N] [--cache-max-bytes B]` (images decoded once, into a
cache that the first epoch or `tensorcom prepare` fills, and mapped from it later; docs/pipeline.md),
`-r SECONDS` between rate reports on stderr, `--portions V` (the stream's portions, default
P; a restart with `--resume` may use another -P, as long as -w stays: -w splits each portion). The
pipelines are tensorcom.images.imagenet's; tensorcom.pipeline.serve_plan runs them. `--ray N [--address ADDR]` serves from N Ray actors in place of
the -P publishers (docs/ray.md; the dataset must be at the same path on every node; `--cache DIR`
is then DIR on each actor's node, each node filling its own).
"""

from __future__ import annotations

import argparse
import os
import sys

from tensorcom.cli.common import (
    Parser,
    add_serving_arguments,
    add_shuffle_arguments,
    count_or_auto,
    entry_point,
    fraction,
    nonnegative_int,
    positive_int,
    serve_plan,
)
from tensorcom.cli.prepare import add_cache_arguments, cache_options
from tensorcom.extras import require
from tensorcom.urls import DEFAULT_SERVER_URL as DEFAULT_URL


def add_common(parser: argparse.ArgumentParser, aliases: bool = False) -> None:
    """The options both servers share (tensorcom 0.1's names and letters; with `aliases`, also 0.1's
    serve-imagenet-shards spellings -N/--num-workers and -p)."""
    more_workers, more_parallel = (["-N", "--num-workers"], ["-p"]) if aliases else ([], [])
    parser.add_argument("urls", nargs="*", metavar="URL", help=f"where to send batches (default {DEFAULT_URL})")
    parser.add_argument("-b", "--batch-size", type=positive_int, default=64, help="images per batch (default 64)")
    parser.add_argument("-w", "--workers", *more_workers, type=count_or_auto, default=0,
                        help="decoding and batching processes per publisher (0: decode in the publisher); "
                             "'auto': as many as keep the consumers fed, changing as it runs")
    parser.add_argument("--min-workers", "--workers-min", type=positive_int, default=1, metavar="N",
                        help="with -w auto: the fewest augmentation processes per publisher (default 1)")
    parser.add_argument("--max-workers", "--workers-max", type=positive_int, default=None, metavar="N",
                        help="with -w auto: the most augmentation processes per publisher (default: the cores)")
    parser.add_argument("-P", "--parallel", *more_parallel, type=nonnegative_int, default=0,
                        help="number of parallel publisher processes, each on a disjoint part of the data")
    parser.add_argument("-n", "--normalize", action="store_true",
                        help="send float32 images normalized with ImageNet mean/std")
    parser.add_argument("-B", "--benchmark", action="store_true", help="preload one batch and serve it repeatedly")
    add_serving_arguments(parser, count_help="stop after N batches in all, each of the stream's V portions "
                          "(--portions, default P) sending ceil(N/V) (0: no limit)")
    parser.add_argument("--size", type=positive_int, default=224, help="output image size (default 224)")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the augmentation and shuffling")
    parser.add_argument("--min-scale", type=fraction, default=0.08,
                        help="smallest crop area as a fraction of the image (default 0.08, as torchvision)")
    add_cache_arguments(parser)


def dir_parser() -> argparse.ArgumentParser:
    """Command line of serve-imagenet-dir."""
    parser = Parser(prog="serve-imagenet-dir", description="Serve an ImageFolder tree with training augmentation.")
    parser.add_argument("-d", "--dir", default="./imagenet", help="dataset directory (uses DIR/train when present)")
    add_shuffle_arguments(parser, default=True, what="the images each epoch (--no-shuffle: file order)", buffer=False)
    add_common(parser)
    return parser


def shards_parser() -> argparse.ArgumentParser:
    """Command line of serve-imagenet-shards."""
    parser = Parser(prog="serve-imagenet-shards", description="Serve tar shards (jpg/png + cls) with training augmentation.")
    parser.add_argument("-u", "--url", required=True, help="shard URLs, brace-expanded: files, http(s)://, s3://, pipe:")
    add_shuffle_arguments(parser, default=False, what="the shards, then the samples through --shuffle-buffer")
    add_common(parser, aliases=True)
    return parser


def serve_args(args: argparse.Namespace, pipeline) -> int:
    """Serve `pipeline` (its first batch over and over with -B) as the command line says; returns 0.
    Checks the URLs against -P before anything is read."""
    from tensorcom.images.imagenet import benchmark_pipeline

    run = serve_plan(args, args.parallel or None)
    run.publishers()
    run.run(benchmark_pipeline(pipeline, args.seed) if args.benchmark else pipeline)
    return 0


def pipeline_options(args: argparse.Namespace) -> dict:
    """The keyword arguments both pipelines take, from the parsed command line (with --ray, --cache made
    absolute: the actors run in other working directories, the same path on each node)."""
    cache = cache_options(args)
    if args.ray is not None and cache["cache"] is not None:
        cache["cache"] = os.path.abspath(cache["cache"])
    workers = args.workers
    if workers == "auto":
        from tensorcom.pipeline.autoscale import Elastic

        workers = Elastic(args.min_workers, args.max_workers)
    return dict(batch_size=args.batch_size, size=args.size, shuffle=args.shuffle, normalize=args.normalize,
                workers=workers, seed=args.seed, min_scale=args.min_scale, dedicated=True,
                **cache)


@entry_point
def main_dir(argv: list[str] | None = None) -> int:
    """serve-imagenet-dir: serve an ImageFolder tree with training augmentation."""
    from tensorcom.images.imagenet import dataset_root, dir_pipeline

    args = dir_parser().parse_args(argv)
    require("PIL")
    return serve_args(args, dir_pipeline(dataset_root(args.dir), **pipeline_options(args)))


@entry_point
def main_shards(argv: list[str] | None = None) -> int:
    """serve-imagenet-shards: serve tar shards (image + cls) with training augmentation."""
    from tensorcom.images.imagenet import shards_pipeline

    args = shards_parser().parse_args(argv)
    require("PIL")
    return serve_args(args, shards_pipeline(args.url, shuffle_buffer=args.shuffle_buffer, **pipeline_options(args)))


if __name__ == "__main__":  # python -m tensorcom.cli.serve_imagenet {dir,shards} ARGS
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which not in ("dir", "shards"):
        print("usage: python -m tensorcom.cli.serve_imagenet {dir,shards} ARGS...", file=sys.stderr)
        sys.exit(2)
    sys.argv = [f"serve-imagenet-{which}", *sys.argv[2:]]
    sys.exit((main_dir if which == "dir" else main_shards)(sys.argv[1:]))
