"""`tensorcom.serve(..., metrics="HOST:PORT")`: the metrics endpoint of a running serve.

    endpoint = serve_metrics("127.0.0.1:0", supervisor, hub)   # None when the address is None
    endpoint.url                                               # http://127.0.0.1:PORT/
    endpoint.close()

When it starts, one line on stderr says where it listens (the port bound, when the address asked for
port 0). The endpoint (tensorcom.transport.metrics_http) reads, at each request, on its own thread, the
figures of the serving report (tensorcom.pipeline._supervisor): the workers' running totals, their
rates over the window of tensorcom.rates, the worker count, where the time goes (the supervisor's
stages, idle and busy seconds and verdict, when its workers send stage records), and with a sharing
server (`hub`) its consumers' records (`hub.server.status`, as the report lines show them). It reads copies: the
supervisor's Rates is the main thread's, and computing rates on it (which drops old snapshots) from
another thread would race with it. Nothing is counted for it per batch.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from tensorcom.transport.metrics_http import MetricsServer, open_metrics


def serve_record(supervisor: Any, hub: Any) -> dict:
    """The raw record of a running serve: the report's figures (read from copies), plus the hub's consumers."""
    reports, counts = supervisor.reports, dict(supervisor.counts)  # C-level copies: atomic under the GIL
    rates = copy.deepcopy(reports.rates)  # reading rates drops old snapshots: read a private copy
    rates.update(sum(b for b, _ in counts.values()), sum(s for _, s in counts.values()))
    figures = {k: v for k, v in rates.as_dict().items() if k not in ("bytes", "MB_per_s")}
    record = {**figures, "seconds": reports.clock() - reports.start, "workers": supervisor.workers}
    where = getattr(supervisor, "where_time_goes", None)  # stages, idle/busy seconds, verdict: a pure read
    record.update(where() if where is not None else {})
    if hub is not None:
        record["consumers"] = list(hub.server.status)
    return record


def serve_metrics(address: str | None, supervisor: Any, hub: Any) -> MetricsServer | None:
    """The endpoint on `address` for a serve's supervisor and hub (None: no endpoint)."""
    endpoint = open_metrics(address, lambda: serve_record(supervisor, hub))
    if endpoint is not None:
        print(f"serve: metrics at {endpoint.metrics_url}, status page at {endpoint.url}", file=sys.stderr, flush=True)
    return endpoint
