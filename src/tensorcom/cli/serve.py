"""`tensorcom serve MODULE:FUNCTION [URL...]`: serve any user pipeline from worker processes.

FUNCTION (importable from MODULE; the current directory is searched first) takes no arguments and
returns either a `tensorcom.Pipeline` or any iterable of batches (list/tuple/dict of arrays). Each of
the `-w N` worker processes calls it and serves its own disjoint share: a Pipeline's `.shard(i, N)`,
or every N-th batch of an iterable (an iterable is computed whole by every worker, so prefer a
Pipeline when there are several). FUNCTION is called again for each epoch.

    tensorcom serve mymodule:make_pipeline zpush://127.0.0.1:7880 -w 4 --epochs 10

URLs and workers follow tensorcom.serve: connecting URLs (zpush, zrpub) take any number of workers;
binding ones (zpub, the default zpub://127.0.0.1:7880) one worker each.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Iterator

from tensorcom.cli.common import Parser, entry_point, nonnegative_int, positive_int
from tensorcom.cli.serve_imagenet import DEFAULT_URL
from tensorcom.pipeline.sources import Source
from tensorcom.pipeline.stages import striding


def build_parser() -> argparse.ArgumentParser:
    """Command line of `tensorcom serve`."""
    parser = Parser(prog="tensorcom serve", description="Serve the pipeline or batches MODULE:FUNCTION returns.")
    parser.add_argument("factory", metavar="MODULE:FUNCTION", help="function returning a Pipeline or an iterable of batches")
    parser.add_argument("urls", nargs="*", metavar="URL", help=f"where to send (default {DEFAULT_URL})")
    parser.add_argument("-w", "--workers", type=positive_int, default=None,
                        help="worker processes (default: one per binding URL, else 1)")
    parser.add_argument("--epochs", type=nonnegative_int, default=0, help="epochs to serve (default 0: forever)")
    parser.add_argument("--count", type=nonnegative_int, default=0, help="stop after about N batches in all (0: no limit)")
    parser.add_argument("-r", "--report", type=float, default=10.0, help="seconds between rate reports on stderr (0: none)")
    return parser


class FunctionSource(Source):
    """A Source that calls the function named `spec` ("module:function") for every epoch and yields
    every `num_workers`-th item of what it returns, starting at `worker`."""

    def __init__(self, spec: str, first: Any = None):
        self.spec = spec
        self.first = first  # the iterable of the call that created this source, used for one epoch

    def __getstate__(self) -> dict:
        return {"spec": self.spec, "first": None}

    def iterate(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Iterator[Any]:
        from tensorcom.pipeline.serving import load_factory

        items = self.first if self.first is not None else load_factory(self.spec)()
        self.first = None
        return striding(iter(items), worker, num_workers)


class AsPipeline:
    """Picklable pipeline factory for tensorcom.serve: calls `spec` and returns its Pipeline, or wraps an
    iterable of batches into a Pipeline over a FunctionSource. TypeError for anything else."""

    def __init__(self, spec: str):
        self.spec = spec

    def __call__(self):
        from tensorcom.pipeline import Pipeline
        from tensorcom.pipeline.serving import load_factory

        made = load_factory(self.spec)()
        if isinstance(made, Pipeline):
            return made
        if not hasattr(made, "__iter__") or isinstance(made, (str, bytes, dict)):
            raise TypeError(f"{self.spec} returned {type(made).__name__}; "
                            "it must return a tensorcom Pipeline or an iterable of batches")
        return Pipeline(FunctionSource(self.spec, made))


@entry_point
def main(argv: list[str] | None = None) -> int:
    """tensorcom serve: parse, check the factory resolves, serve until done; returns 0."""
    from tensorcom.pipeline.serving import assign_urls, load_factory, serve

    args = build_parser().parse_args(argv)
    load_factory(args.factory)  # fails early on a bad name; puts the current directory on sys.path
    urls = args.urls or [DEFAULT_URL]
    count = len(assign_urls(urls, args.workers)[0])
    factory: Any = AsPipeline(args.factory)
    epochs = args.epochs or None
    if args.count:
        factory, epochs = Limited(factory, epochs, -(-args.count // count)), 1
    print(f"serving {args.factory} to {' '.join(urls)} from {count} worker(s)", file=sys.stderr, flush=True)
    serve(factory, urls, workers=args.workers, epochs=epochs, report=args.report or None)
    return 0


class Limited:
    """Picklable factory: `factory()`'s pipeline repeated for `epochs` (None: forever), cut at `count` items."""

    def __init__(self, factory: Any, epochs: int | None, count: int):
        self.factory, self.epochs, self.count = factory, epochs, count

    def __call__(self):
        return self.factory().repeat(self.epochs).take(self.count)
