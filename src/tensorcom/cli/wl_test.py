"""wl-test URL [--decode rgb8] [--processes P] [-c N]: how fast a source reads (and decodes).

    wl-test 'data-{000..009}.tar'                       # raw read, one process
    wl-test 'data-{000..009}.tar' --decode rgb8 -p 4    # decode too, shards spread over 4 processes

Prints samples, bytes, seconds, samples/s and MB/s (MB = 10^6 bytes of raw field data).
"""

from __future__ import annotations

import contextlib
import functools
import json
import time

from tensorcom.cli import common, wlcommon
from tensorcom.cli.common import entry_point


def parse(argv: list[str] | None):
    """Parsed arguments: url, decode, processes, count, json."""
    parser = wlcommon.make_parser("wl-test", __doc__)
    parser.add_argument("-d", "--decode", choices=wlcommon.DECODE_CHOICES, default="none",
                        help="decode images as this too; 'none' measures raw reading (default: none)")
    parser.add_argument("-p", "--processes", type=common.nonnegative_int, default=0,
                        help="read shards in this many spawned processes (default: 0, in this one)")
    parser.add_argument("-c", "--count", type=common.positive_int, default=None,
                        help="stop after this many samples (with -p: after the shard that reaches it)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser.parse_args(argv)


def read(url: str, image: str, count: int | None,
         require_end_blocks: bool = True) -> tuple[int, int, float, float]:
    """Read (and decode) up to `count` samples of `url`: (samples, raw bytes, start, end wall time)."""
    # the reader, the URL openers and the decoders imported before the clock starts (tensorcom.shards
    # imports them on first use)
    from tensorcom.shards import ShardReader, fields, gopen, shardlist  # noqa: F401

    start = time.time()
    nsamples = nbytes = 0
    for sample in wlcommon.samples(url, count=count, require_end_blocks=require_end_blocks):
        nbytes += wlcommon.raw_size(sample)
        wlcommon.decode(sample, image)
        nsamples += 1
    return nsamples, nbytes, start, time.time()


def read_parallel(url: str, image: str, count: int | None, processes: int) -> tuple[int, int, float]:
    """Read the shards of `url` in `processes` workers: (samples, bytes, seconds from first start to last end)."""
    shards = wlcommon.shard_list(url)
    total = nbytes = 0
    first, last = float("inf"), 0.0
    job = functools.partial(read, image=image, count=count)
    results = wlcommon.run_tasks(job, shards, processes, buffer=processes)
    with contextlib.closing(results):
        for nsamples, size, start, end in results:
            total, nbytes = total + nsamples, nbytes + size
            first, last = min(first, start), max(last, end)
            if count is not None and total >= count:
                break
    return total, nbytes, max(last - first, 0.0)


def rates(nsamples: int, nbytes: int, seconds: float) -> dict[str, float]:
    """The report: samples, bytes, seconds, samples_per_s, MB_per_s; the figures keep five
    significant digits, so a slow read of small samples is not reported as 0 MB/s."""
    seconds = max(seconds, 1e-9)
    figures = {"seconds": seconds, "samples_per_s": nsamples / seconds, "MB_per_s": nbytes / seconds / 1e6}
    return {"samples": nsamples, "bytes": nbytes, **{key: float(f"{value:.5g}") for key, value in figures.items()}}


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Read URL as asked and print the rates."""
    args = parse(argv)
    if args.processes > 0:
        nsamples, nbytes, seconds = read_parallel(args.url, args.decode, args.count, args.processes)
    else:
        nsamples, nbytes, start, end = read(args.url, args.decode, args.count, args.require_end_blocks)
        seconds = end - start
    result = rates(nsamples, nbytes, seconds)
    result.update(decode=args.decode, processes=args.processes)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"samples {nsamples}  bytes {nbytes}  seconds {result['seconds']:.3f}  "
              f"samples/s {result['samples_per_s']:.1f}  MB/s {result['MB_per_s']:.2f}  "
              f"(decode {args.decode}, processes {args.processes})")
    return 0
