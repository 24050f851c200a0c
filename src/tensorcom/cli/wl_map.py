"""wl-map URL -e EXPR | -m MODULE:FUNC -o PATTERN [-p PROCS]: transform every sample, write shards.

    wl-map data.tar -e 'dict(sample, cls=int(sample["cls"]) + 1)' -o 'out-%06d.tar' --maxcount 1000
    wl-map 'data-{000..009}.tar' -m mymod:resize -d rgb8 -p 4 -o 'small-%04d.tar'

EXPR sees `sample` (and np, json, re, math); FUNC takes the sample. Either returns a sample dict,
a list of them, or None to drop the sample; a result without __key__ keeps the input's key.
Samples are raw bytes unless -d/--decode says how to decode; output values are encoded by
extension. With -p the work runs in spawned processes and the output keeps the input order.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any, Callable

from tensorcom.cli import common, wlcommon
from tensorcom.cli.common import entry_point
from tensorcom.pipeline.function_spec import load_function
from tensorcom.progress import Progress


def parse(argv: list[str] | None):
    """Parsed arguments: url, expr, module, output, processes, decode, maxcount, maxsize, count, skip."""
    parser = wlcommon.make_parser("wl-map", __doc__)
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("-e", "--expr", help="Python expression over `sample` giving the output sample(s)")
    how.add_argument("-m", "--module", help="MODULE:FUNC or path/file.py:FUNC; FUNC(sample) gives the output")
    parser.add_argument("-o", "--output", default=None,
                        help="output: shard pattern with %%d (out-%%06d.tar) or one .tar; "
                        "without it, print each output sample's key and fields")
    parser.add_argument("-p", "--processes", "--parallel", type=common.nonnegative_int, default=0,
                        help="worker processes (default: 0, in this one)")
    parser.add_argument("-d", "--decode", choices=wlcommon.DECODE_CHOICES, default="none",
                        help="decode samples before the transform (default: none, raw bytes)")
    parser.add_argument("--maxcount", type=common.positive_int, default=None, help="samples per output shard")
    parser.add_argument("--maxsize", type=common.positive_int, default=None, help="bytes per output shard")
    wlcommon.add_range_args(parser)
    wlcommon.add_progress_args(parser)
    return parser.parse_args(argv)


@functools.lru_cache(maxsize=8)
def _compiled(expr: str):
    """The compiled code of `expr` (cached: each worker compiles once)."""
    return compile(expr, "<wl-map -e>", "eval")


def eval_expr(expr: str, sample: dict) -> Any:
    """Evaluate `expr` with `sample` in scope, plus np, json, re and math."""
    import json
    import math
    import re

    import numpy as np

    return eval(_compiled(expr), {"np": np, "json": json, "re": re, "math": math, "sample": sample})


def transform(sample: dict, expr: str | None, module: str | None, image: str) -> list[dict]:
    """Apply the expression or the module function to one raw sample: the list of output samples,
    already encoded to bytes by extension (so encoding runs in the workers, and its errors name the key)."""
    func = functools.partial(eval_expr, expr) if expr is not None else _cached_function(module)
    result = func(wlcommon.decode(sample, image))
    if result is None or result is False:
        return []
    outputs = result if isinstance(result, (list, tuple)) else [result]
    for out in outputs:
        if not isinstance(out, dict):
            raise TypeError(f"the transform must give a dict, a list of dicts or None, got {type(out).__name__}")
        out.setdefault("__key__", sample.get("__key__"))
    from tensorcom.shards import encode_sample

    return [encode_sample(wlcommon.writable(out)) for out in outputs]


@functools.lru_cache(maxsize=8)
def _cached_function(spec: str) -> Callable[[dict], Any]:
    """load_function, once per process."""
    return load_function(spec, "-m function")


def results(args) -> Any:
    """Lists of output samples, one list per input sample, in input order."""
    if args.module is not None:
        _cached_function(args.module)  # fail early, in this process, on a bad -m
    else:
        _compiled(args.expr)  # a SyntaxError here is a ValueError-like usage error
    job = functools.partial(transform, expr=args.expr, module=args.module, image=args.decode)
    source = wlcommon.samples(args.url, skip=args.skip, count=args.count,
                              require_end_blocks=args.require_end_blocks)
    return wlcommon.run_tasks(job, source, args.processes)


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Run the transform over URL and write (or list) the output samples; a count goes to stderr."""
    args = parse(argv)
    try:
        outputs = results(args)
    except SyntaxError as exc:
        raise ValueError(f"-e {args.expr!r}: {exc.msg}") from None
    with contextlib.closing(outputs), wlcommon.progress("wl-map", args) as shown:
        written = write_all(outputs, args, shown)
    print(f"wl-map: {written} samples out", file=sys.stderr)
    return 0


def write_all(outputs, args, shown: Progress) -> int:
    """Write (or, without -o, list) every output sample, counting each on `shown`; returns how many. A
    failure abandons the shard being written (no partial file under its name) and names it (wlcommon.writing)."""
    written = 0
    if args.output is None:
        for batch in outputs:
            for out in batch:
                print(out.get("__key__"), *sorted(k for k in out if not k.startswith("__")), sep="\t")
                written += 1
                shown.update(1)
    else:
        with wlcommon.writing(args.output, args.maxcount, args.maxsize) as sink:
            for batch in outputs:
                for out in batch:
                    sink.write(out)
                    written += 1
                    wlcommon.count_written(shown, sink)
    return written
