"""`tensorcom serve MODULE:FUNCTION [URL...]`: serve any user pipeline from worker processes.

FUNCTION (importable from MODULE; the current directory is searched first) takes no arguments and
returns either a `tensorcom.Pipeline` or any iterable of batches (list/tuple/dict of arrays). Each of
the `-w N` worker processes calls it and serves its own disjoint portion: a Pipeline's `.shard(i, N)`,
or every N-th batch of an iterable (an iterable is computed whole by every worker, so prefer a
Pipeline when there are several). FUNCTION is called again for each epoch. `--shuffle` shuffles what
it returns through a buffer of `--shuffle-buffer` items (default: served in its own order).

    tensorcom serve mymodule:make_pipeline zpush://127.0.0.1:7880 -w 4 --epochs 10

URLs and workers follow tensorcom.serve: connecting URLs (zpush, zrpub) take any number of workers;
binding ones (zpub, the default zpub://127.0.0.1:7880) one worker each. The stream has `--portions V`
portions (default: the workers), which the workers share out; a restart with `--resume FILE` may use
another `-w`. Options may come before,
between or after MODULE:FUNCTION and the URLs.

`--ray N` serves from N Ray actors instead of local worker processes (tensorcom.ray; docs/ray.md),
on a new local Ray instance or the cluster `--address` names, so the same command runs on a laptop
and on a cluster; with a zshare:// or zsplit:// URL a dead actor is restarted without loss:

    tensorcom serve --ray 8 --address auto mymodule:make_pipeline zsplit://0.0.0.0:7880 --epochs 90
"""

from __future__ import annotations

import argparse

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
    parser.add_argument("-w", "--workers", type=positive_int, default=None,
                        help="worker processes (default: one per binding URL, else 1)")
    add_serving_arguments(parser, count_help="stop after about N batches in all (0: no limit)")
    add_shuffle_arguments(parser, default=False, what="the items FUNCTION returns through --shuffle-buffer")
    return parser


@entry_point
def main(argv: list[str] | None = None) -> int:
    """tensorcom serve: parse, check the factory and URLs, serve until done; returns 0."""
    from tensorcom.pipeline.function_source import FunctionPipeline
    from tensorcom.pipeline.serving import load_factory

    args = build_parser().parse_args(argv)
    load_factory(args.factory)  # fails early on a bad name; puts the current directory on sys.path
    run = serve_plan(args, args.workers)
    run.publishers()  # fails early on URLs that cannot work with -w
    run.run(FunctionPipeline(args.factory, args.shuffle_buffer if args.shuffle else 0), announce=args.factory)
    return 0
