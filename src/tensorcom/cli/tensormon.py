"""tensormon URL… — receive batches and print one line of rates per report interval.

    tensormon zsub://127.0.0.1:7880 --count 1000 --report 2 --json

Each line: batches/s, samples/s, MB/s over the last 10 s (the window of tensorcom.rates: the figures
of Connection.stats), the last batch size, the batches known to be dropped (lossy PUB/SUB), and the
running total. Exits after --count batches (default: never).
With --consumers and zjoin:// URLs it joins a sharing server as an observer and prints, per report,
each consumer's position (epoch, batch), lag behind the stream (a restarted job catching up shows
"catching up N": the batches it still lacks of what it missed), rate and credit in use.
"""

from __future__ import annotations

import json
import sys

from tensorcom.cli.common import Parser, add_source_arguments, entry_point, open_source, positive_int, seconds
from tensorcom.rates import Throttle, consumer_lines
from tensorcom.transport.connection import Connection


def report_line(conn: Connection, as_json: bool) -> str:
    """One report: the connection's totals and rates over the window of tensorcom.rates."""
    snapshot = conn.stats.as_dict()
    figures = {key: snapshot[key] for key in ("batches_per_s", "samples_per_s", "MB_per_s", "dropped", "batches")}
    figures["batch_size"] = conn.batch_size
    if as_json:
        return json.dumps(figures)
    return ("{batches_per_s:10.1f} batches/s {samples_per_s:12.1f} samples/s {MB_per_s:10.2f} MB/s "
            "batch {batch_size} dropped {dropped} total {batches}").format(**figures)


def monitor(conn: Connection, count: int | None, every: float, as_json: bool) -> int:
    """Receive until `count` batches (None: forever), printing a report every `every` seconds and
    after the last batch."""
    stats, throttle = conn.stats, Throttle(every)
    throttle.start()
    while count is None or stats.count < count:
        conn.recv()
        if throttle.due(force=stats.count == count):
            print(report_line(conn, as_json), flush=True)
    return stats.count


def watch_consumers(conn: Connection, count: int | None, every: float, as_json: bool) -> int:
    """Print the sharing server's consumer table every `every` seconds, `count` times (None: forever)."""
    reports = 0
    while count is None or reports < count:
        status = conn.consumer_status(wait=every)
        print(json.dumps(status) if as_json else "\n".join([f"{len(status)} consumer(s)", *consumer_lines(status)]),
              flush=True)
        reports += 1
    return reports


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Parse arguments, monitor the URLs, exit 0 after --count batches."""
    parser = Parser(prog="tensormon", description=__doc__.splitlines()[0])
    add_source_arguments(parser)
    parser.add_argument("--count", type=positive_int, default=None, metavar="N", help="exit after N batches")
    parser.add_argument("--report", type=seconds, default=1.0, metavar="SECONDS",
                        help="seconds between report lines (default 1)")
    parser.add_argument("--json", action="store_true", help="print each report as a JSON object")
    parser.add_argument("--consumers", action="store_true",
                        help="zjoin:// URLs: watch the sharing server's consumers (position, lag or catching up, rate, "
                             "credit) "
                             "without taking batches; --count counts reports")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.consumers:
        with open_source(args, observe=True) as conn:
            watch_consumers(conn, args.count, args.report, args.json)
        return 0
    with open_source(args) as conn:
        monitor(conn, args.count, args.report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
