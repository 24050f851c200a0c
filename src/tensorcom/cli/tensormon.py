"""tensormon URL… — receive batches and print one line of rates per report interval.

    tensormon zsub://127.0.0.1:7880 --count 1000 --report 2 --json

Each line: batches/s, samples/s, MB/s over the last 10 s (the window of tensorcom.rates: the figures
of Connection.stats), the last batch size, the batches known to be dropped (lossy PUB/SUB), and the
running total. Exits after --count batches (default: never).
With --consumers and zjoin:// URLs it joins a sharing server as an observer and prints, per report,
each consumer's position (epoch, batch), lag behind the stream (a restarted job catching up shows
"catching up N": the batches it still lacks of what it missed), rate, credit in use and data wait
(the recent share of the job's loop blocked waiting for data, which the job reports with its
acknowledgements; docs/monitoring.md). --stages adds the server's stage shares and verdict, when the
serving process sent them. On a terminal the table refreshes in place (with rich, when installed);
otherwise one block of lines per report; --json prints one JSON value per report: the consumer
records (a list), or with --stages {"consumers": [...], "server": the server's record or null}.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

from tensorcom.cli.common import Parser, add_source_arguments, entry_point, open_source, positive_int, seconds
from tensorcom.rates import Throttle, consumer_cells, consumer_lines
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


def stage_lines(server: dict | None) -> list[str]:
    """The server record's stages, largest share first ("stages": {name: {"seconds", "share"}}), and
    its verdict; one line saying there is none without them."""
    stages = (server or {}).get("stages") or {}
    if not stages and not (server or {}).get("verdict"):
        return ["  stages: none reported by the server"]
    ordered = sorted(stages.items(), key=lambda item: -item[1].get("share", 0.0))
    lines = [f"  stage {name}: {100 * s.get('share', 0.0):.0f}% ({s.get('seconds', 0.0):.1f} s)" for name, s in ordered]
    return lines + ([f"  verdict: {server['verdict']}"] if server.get("verdict") else [])


def report_text(status: list[dict], server: dict | None, stages: bool) -> str:
    """One report in plain lines: the consumer count and lines (tensorcom.rates.consumer_lines), the stages."""
    return "\n".join([f"{len(status)} consumer(s)", *consumer_lines(status), *(stage_lines(server) if stages else [])])


def report_table(status: list[dict], server: dict | None, stages: bool) -> Any:
    """One report as a rich renderable: a table of the consumers (consumer_cells) and the stage lines."""
    from rich.console import Group
    from rich.table import Table

    table = Table(title=f"{len(status)} consumer(s)")
    for column in ("consumer", "position", "rate", "credit", "data wait"):
        table.add_column(column)
    for record in status:
        cells = consumer_cells(record)
        table.add_row(str(record["name"]), *cells[:3], cells[3].removeprefix("data wait ") if len(cells) > 3 else "-")
    return Group(table, *(stage_lines(server) if stages else []))


def live_display() -> Any:
    """A rich Live display on a terminal; None when stdout is not one or rich is not installed."""
    if not sys.stdout.isatty():
        return None
    try:
        from rich.live import Live
    except ImportError:
        return None
    return Live(auto_refresh=False)


def watch_consumers(conn: Connection, count: int | None, every: float, as_json: bool, stages: bool = False) -> int:
    """Print the sharing server's consumer table (and with `stages` the server's stage shares) every
    `every` seconds, `count` times (None: forever): JSON, a table refreshed in place, or lines."""
    live = None if as_json else live_display()
    reports = 0
    with live if live is not None else contextlib.nullcontext():
        while count is None or reports < count:
            status = conn.consumer_status(wait=every)
            server = conn.server_report if stages else None
            if as_json:
                print(json.dumps({"consumers": status, "server": server} if stages else status), flush=True)
            elif live is not None:
                live.update(report_table(status, server, stages), refresh=True)
            else:
                print(report_text(status, server, stages), flush=True)
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
    parser.add_argument("--json", action="store_true",
                        help="print each report as one JSON value for scripts: the figures, or with --consumers the "
                             "consumer records (a list; with --stages {\"consumers\", \"server\"})")
    parser.add_argument("--consumers", action="store_true",
                        help="zjoin:// URLs: watch the sharing server's consumers (position, lag or catching up, rate, "
                             "credit, "
                             "data wait) without taking batches; --count counts reports")
    parser.add_argument("--stages", action="store_true",
                        help="with --consumers: also the server's stage shares and verdict (when its serving "
                             "process reports them)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.stages and not args.consumers:
        parser.error("--stages needs --consumers (zjoin:// URLs of a sharing server)")
    if args.consumers:
        with open_source(args, observe=True) as conn:
            watch_consumers(conn, args.count, args.report, args.json, args.stages)
        return 0
    with open_source(args) as conn:
        monitor(conn, args.count, args.report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
