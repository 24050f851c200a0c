"""`tensorcom serve MODULE:FUNCTION [URL...]`: serve any user pipeline from worker processes.

FUNCTION (importable from MODULE; the current directory is searched first) takes no arguments and
returns either a `tensorcom.Pipeline` or any iterable of batches (list/tuple/dict of arrays). Each of
the `-w N` worker processes calls it and serves its own disjoint portion: a Pipeline's `.shard(i, N)`,
or every N-th batch of an iterable (an iterable is computed whole by every worker, so prefer a
Pipeline when there are several). FUNCTION is called again for each epoch. `--cache DIR` gives the
pipeline's `.cache()` stages (those without a directory) DIR. `--shuffle` shuffles what
it returns through a buffer of `--shuffle-buffer` items (default: served in its own order).

    tensorcom serve mymodule:make_pipeline zpush://127.0.0.1:7880 -w 4 --epochs 10

URLs and workers follow tensorcom.serve: connecting URLs (zpush, zrpub) take any number of workers;
binding ones (zpub, the default zpub://127.0.0.1:7880) one worker each. The stream has `--portions V`
portions (default: the workers), which the workers share out; a restart with `--resume FILE` may use
another `-w`. Options may come before,
between or after MODULE:FUNCTION and the URLs.

`-w auto` starts --min-workers processes (default 1) and adds one while the consumers wait for data
and the machine has an idle core, removes one while they sit waiting on the consumers, up to
--max-workers (default: the cores), which is also the stream's portions unless --portions says; the
number changes only between epochs (docs/scaling.md, "Workers that scale themselves").

`--ray N` serves from N Ray actors instead of local worker processes (tensorcom.ray; docs/ray.md),
on a new local Ray instance or the cluster `--address` names, so the same command runs on a laptop
and on a cluster; with a zshare:// or zsplit:// URL a dead actor is restarted without loss. With
`--cache DIR` each actor's cache(None) stages take DIR on the actor's own node (the same path on
every node, made where missing; each node fills its own):

    tensorcom serve --ray 8 --address auto mymodule:make_pipeline zsplit://0.0.0.0:7880 --epochs 90
"""

from __future__ import annotations

import argparse
from typing import Any

from tensorcom.cli.common import (
    Parser,
    add_serving_arguments,
    add_shuffle_arguments,
    entry_point,
    positive_int,
    serve_plan,
)
from tensorcom.urls import DEFAULT_SERVER_URL as DEFAULT_URL


def build_parser() -> argparse.ArgumentParser:
    """Command line of `tensorcom serve`."""
    parser = Parser(prog="tensorcom serve", description="Serve the pipeline or batches MODULE:FUNCTION returns.")
    parser.add_argument("factory", metavar="MODULE:FUNCTION", help="function returning a Pipeline or an iterable of batches")
    parser.add_argument("urls", nargs="*", metavar="URL", help=f"where to send (default {DEFAULT_URL})")
    parser.add_argument("-w", "--workers", type=workers_or_auto, default=None,
                        help="worker processes, or 'auto': as many as keep the consumers fed, from --min-workers "
                             "to --max-workers, changing at epoch boundaries (default: one per binding URL, else 1)")
    parser.add_argument("--min-workers", type=positive_int, default=None, metavar="N",
                        help="with -w auto: the fewest worker processes (default 1)")
    parser.add_argument("--max-workers", type=positive_int, default=None, metavar="N",
                        help="with -w auto: the most worker processes, and the portions unless --portions "
                             "(default: the machine's cores)")
    parser.add_argument("--cache", default=None, metavar="DIR",
                        help="the directory of the pipeline's cache(None) stages: decoded images stored once, "
                             "mapped in later epochs (docs/pipeline.md, 'Caching decoded images')")
    add_serving_arguments(parser, count_help="stop after about N batches in all (0: no limit)")
    add_shuffle_arguments(parser, default=False, what="the items FUNCTION returns through --shuffle-buffer")
    return parser


def workers_or_auto(text: str) -> int | str:
    """argparse type of -w: a count >= 1, or "auto"."""
    return "auto" if text == "auto" else positive_int(text)


def plan(args: argparse.Namespace) -> Any:
    """The ServePlan (tensorcom.pipeline.serve_plan) of a parsed command line: common.serve_plan's, with
    --cache (the local processes' directory, or with --ray each actor's on its node) and -w auto's
    bounds; ValueError for --min-workers / --max-workers without -w auto."""
    bounds = {"min_workers": args.min_workers, "max_workers": args.max_workers}
    if args.workers != "auto" and any(value is not None for value in bounds.values()):
        raise ValueError("--min-workers and --max-workers go with -w auto")
    run = serve_plan(args, args.workers)
    if args.cache is not None:
        run.options["cache"] = args.cache
    if args.workers == "auto":
        run.options.update({key: value for key, value in bounds.items() if value is not None})
    return run


@entry_point
def main(argv: list[str] | None = None) -> int:
    """tensorcom serve: parse, check the factory and URLs, serve until done; returns 0."""
    from tensorcom.pipeline.function_source import FunctionPipeline
    from tensorcom.pipeline.serving import load_factory

    args = build_parser().parse_args(argv)
    load_factory(args.factory)  # fails early on a bad name; puts the current directory on sys.path
    run = plan(args)
    run.publishers()  # fails early on URLs that cannot work with -w
    run.run(FunctionPipeline(args.factory, args.shuffle_buffer if args.shuffle else 0), announce=args.factory)
    return 0
