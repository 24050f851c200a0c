"""wl-xargs URL -c 'SHELL COMMAND' -o PATTERN [-p PROCS] [--fields ...]: run a command per sample.

    wl-xargs data.tar -c 'convert sample.jpg -resize 50% sample.png && rm sample.jpg' -o 'small-%04d.tar'
    wl-xargs 'data-{000..009}.tar' -f txt -c 'wc -w < sample.txt > sample.count' -o counts.tar -p 4

For each sample, its fields are written as files BASE.EXT (BASE is "sample" unless -b says
otherwise) in a fresh temporary directory; COMMAND runs there under /bin/sh with the sample key in
$KEY. The files it leaves, named NAME.EXT, become the output sample's fields EXT (input files count
too unless the command removes them or --exclude drops them). A non-zero exit stops the tool with an
error naming the key, or with --skip-errors drops that sample and reports a count on stderr.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys

from tensorcom.cli import common, wlcommon
from tensorcom.cli.common import entry_point
from tensorcom.pipeline.commands import CommandJob, run_sample
from tensorcom.progress import Progress


def parse(argv: list[str] | None):
    """Parsed arguments of wl-xargs."""
    parser = wlcommon.make_parser("wl-xargs", __doc__)
    parser.add_argument("-c", "--command", required=True, help="shell command, run in the sample's directory")
    parser.add_argument("-o", "--output", default=None,
                        help="output: shard pattern with %%d (out-%%06d.tar) or one .tar; "
                        "without it nothing is written")
    parser.add_argument("-p", "--processes", "--parallel", type=common.nonnegative_int, default=0,
                        help="run commands in this many worker processes (default: 0, in this one)")
    parser.add_argument("-f", "--fields", nargs="+", default=None,
                        help="fields to write as files, comma/space separated (default: all)")
    parser.add_argument("-b", "--base", default="sample", help="base name of the input files (default: sample)")
    parser.add_argument("--skip-errors", action="store_true",
                        help="drop samples whose command fails (non-zero exit, timeout) and count them on stderr")
    parser.add_argument("--timeout", type=float, default=None, help="seconds one command may run (default: no limit)")
    parser.add_argument("-I", "--include", default=None, help="collect only files whose name matches this regex")
    parser.add_argument("-E", "--exclude", default=None, help="do not collect files whose name matches this regex")
    parser.add_argument("--maxcount", type=common.positive_int, default=None, help="samples per output shard")
    parser.add_argument("--maxsize", type=common.positive_int, default=None, help="bytes per output shard")
    parser.add_argument("--count", type=common.nonnegative_int, default=None, help="use at most this many samples")
    parser.add_argument("--skip", type=common.nonnegative_int, default=0, help="skip this many samples first")
    wlcommon.add_progress_args(parser)
    return parser.parse_args(argv)


def make_job(args) -> CommandJob:
    """The per-sample job description from the arguments (regexes checked here)."""
    for flag, pattern in (("--include", args.include), ("--exclude", args.exclude)):
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{flag} {pattern!r}: {exc}") from None
    if not args.base or "/" in args.base:
        raise ValueError(f"--base must be a plain file name, got {args.base!r}")
    return CommandJob(command=args.command, base=args.base, timeout=args.timeout, include=args.include,
                      exclude=args.exclude, skip_errors=args.skip_errors)


def write_all(results, args, shown: Progress) -> tuple[int, list]:
    """Write the output samples (when -o is given), counting each on `shown`; returns (written, failures).
    A failure abandons the shard being written (no partial file under its name) and names it (wlcommon.writing)."""
    failures: list = []
    written = 0
    with contextlib.ExitStack() as stack:
        sink = None if args.output is None else stack.enter_context(
            wlcommon.writing(args.output, args.maxcount, args.maxsize))
        for result in results:
            if not isinstance(result, dict):
                failures.append(result)
                continue
            if sink is not None:
                sink.write(result)
            written += 1
            wlcommon.count_written(shown, sink)
    return written, failures


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Run the command over every sample of URL; summary (and skipped count) on stderr."""
    args = parse(argv)
    job = functools.partial(run_sample, job=make_job(args))
    fields = wlcommon.parse_fields(args.fields)
    source = (wlcommon.select_fields(sample, fields) for sample in
              wlcommon.samples(args.url, skip=args.skip, count=args.count, require_end_blocks=args.require_end_blocks))
    results = wlcommon.run_tasks(job, source, args.processes)
    with contextlib.closing(results), wlcommon.progress("wl-xargs", args) as shown:
        written, failures = write_all(results, args, shown)
    print(f"wl-xargs: {written} samples out", file=sys.stderr)
    if failures:
        key, why = failures[0][1], failures[0][2]
        print(f"wl-xargs: skipped {len(failures)} samples whose command failed (first: {key!r}, {why})",
              file=sys.stderr)
    return 0
