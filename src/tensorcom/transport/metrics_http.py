"""The metrics endpoint: `/metrics` (Prometheus' text format), `/status.json` and `/` (a live page).

    server = open_metrics("127.0.0.1:9100", source)   # None when the address is None
    server.url, server.metrics_url                    # http://127.0.0.1:PORT/ and .../metrics
    server.close()

`source()` returns the owner's raw record (tensorcom.transport.observation's docstring says what it may
hold); it is called at each request, on the HTTP server's thread, and nothing else runs in between:
the endpoint costs nothing per batch. A source that reads counters its owner updates meanwhile may
raise RuntimeError (a container changed during iteration) while it copies them: the read is tried
again. Sources read private copies of what the owner's thread updates, so that reading never
changes the owner's state.

HOST:PORT: HOST defaults to 127.0.0.1 (":9100"), port 0 takes a free port (reported by `.url`).
Requests: GET /metrics -> text/plain in Prometheus' exposition format, rendered by prometheus_client
(tensorcom[metrics]) from observation.metric_families; GET /status.json -> observation.normalize's
record; GET / -> the status page (tensorcom.transport._status_page), which polls /status.json every
second. Anything else: 404. The server runs on a daemon thread (http.server's ThreadingHTTPServer)
that close() stops and joins.

`connection_record(conn)` is a Connection's raw record: its totals and rates, and its consumers (a
sharing server's) or itself as the one consumer (a receiver).
"""

from __future__ import annotations

import copy
import json
import threading
import weakref
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from tensorcom.transport._status_page import PAGE
from tensorcom.transport.observation import metric_families, normalize

READ_TRIES = 5  # reads of a source whose owner changed a container meanwhile


def parse_address(text: Any) -> tuple[str, int]:
    """("HOST", PORT) of "HOST:PORT" (":PORT": 127.0.0.1; PORT 0: a free port); ValueError otherwise."""
    if not isinstance(text, str) or ":" not in text:
        raise ValueError(f"metrics: expected HOST:PORT (e.g. 127.0.0.1:9100, :0 for a free port), got {text!r}")
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"metrics: the port of {text!r} must be a number from 0 to 65535")
    return host, int(port)


def read(source: Callable[[], dict]) -> dict:
    """normalize(source()), tried again while the owner changes what the source reads."""
    for attempt in range(READ_TRIES):
        try:
            return normalize(source())
        except RuntimeError:
            if attempt == READ_TRIES - 1:
                raise
    raise AssertionError("unreachable")


class Collector:
    """A prometheus_client collector: `collect()` reads the source and yields its metric families."""

    def __init__(self, source: Callable[[], dict]):
        self.source = source

    def collect(self) -> Any:
        from tensorcom.extras import require

        core = require("prometheus_client.core")
        kinds = {"counter": core.CounterMetricFamily, "gauge": core.GaugeMetricFamily}
        for family in metric_families(read(self.source)):
            labels = sorted({key for labels, _ in family.samples for key in labels})
            made = kinds[family.kind](family.name, family.help, labels=labels)
            for sample_labels, value in family.samples:
                made.add_metric([sample_labels[key] for key in labels], value)
            yield made


def render_metrics(source: Callable[[], dict]) -> bytes:
    """The /metrics body: the source's families in Prometheus' text format."""
    from tensorcom.extras import require

    return require("prometheus_client").generate_latest(Collector(source))  # type: ignore[arg-type]


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                self._answer(200, "text/plain; version=0.0.4; charset=utf-8", render_metrics(self.server.source))
            elif path == "/status.json":
                self._answer(200, "application/json", json.dumps(read(self.server.source)).encode())
            elif path in ("/", "/index.html"):
                self._answer(200, "text/html; charset=utf-8", PAGE.encode())
            else:
                self._answer(404, "text/plain", b"not found: try /metrics, /status.json or /\n")
        except Exception as exc:  # a failing source answers 500 with the reason, the server goes on
            self._answer(500, "text/plain", f"{type(exc).__name__}: {exc}\n".encode())

    def _answer(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        pass  # scrapes every few seconds would flood stderr


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    source: Callable[[], dict]


class MetricsServer:
    """The endpoint on `address` ("HOST:PORT"), serving `source` from a thread until close()."""

    def __init__(self, address: str, source: Callable[[], dict]):
        host, port = parse_address(address)
        try:
            self.httpd = _Server((host, port), _Handler)
        except OSError as exc:
            raise OSError(exc.errno, f"metrics: cannot listen on {address}: {exc.strerror}") from exc
        self.httpd.source = source
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                       name="tensorcom-metrics", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """http://HOST:PORT/ with the port actually bound."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/"

    @property
    def metrics_url(self) -> str:
        return self.url + "metrics"

    def close(self) -> None:
        """Stop serving and join the thread; safe to call twice."""
        if self.thread.is_alive():
            self.httpd.shutdown()
            self.thread.join()
        self.httpd.server_close()


def open_metrics(address: str | None, source: Callable[[], dict]) -> MetricsServer | None:
    """A MetricsServer on `address`, or None when `address` is None; ValueError for a malformed
    address, MissingDependency without prometheus_client (checked before binding)."""
    if address is None:
        return None
    parse_address(address)
    from tensorcom.extras import require

    require("prometheus_client")
    return MetricsServer(address, source)


def connection_record(conn: Any) -> dict:
    """A Connection's raw record: conn.stats's figures, and its consumers (a sharing server) or
    itself as the one consumer (a receiver: its samples, rate and data wait)."""
    figures = copy.deepcopy(conn.stats).as_dict()  # reading rates changes them: read a private copy
    consumers = conn.consumers if conn.endpoints and any(e.sharing and e.bind for e in conn.endpoints) else None
    if consumers is None and conn.endpoints and not any(e.sends for e in conn.endpoints):
        consumers = [{**figures, "name": conn.sender}]
    return {**figures, "consumers": consumers or []}


def connection_metrics(address: str, conn: Any) -> MetricsServer | None:
    """The endpoint of Connection(..., metrics=address), reading `conn` through a weak reference (the
    endpoint never keeps a dropped Connection alive; its close() stops the endpoint)."""
    ref = weakref.ref(conn)

    def source() -> dict:
        alive = ref()
        if alive is None:
            raise LookupError("the Connection is gone (collected without close())")
        return connection_record(alive)

    return open_metrics(address, source)
