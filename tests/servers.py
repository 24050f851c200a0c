"""Real local servers for shard tests, bound to 127.0.0.1 and torn down by their owners.

FileServer: a threaded HTTP server for one directory, with test routes
    /status/NNN/...     answers status NNN
    /flaky/N/PATH       answers 503 to the first N requests for PATH, then serves it
    /cut/N/PATH         every request sends the first N bytes of the body (announcing it whole) and closes
    /drop/PATH          the first request for PATH sends half the body and closes the connection;
                        Range requests are honoured, so a client can resume
start_moto(...): moto's standalone S3 server (`python -m moto.server`) as a subprocess.
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path


class _Handler(http.server.BaseHTTPRequestHandler):
    server: "FileServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self.server.requests[self.path] += 1
        parts = self.path.lstrip("/").split("/")
        if parts[0] == "status":
            return self._reply(int(parts[1]), b"error page\n")
        if parts[0] == "flaky":
            if self.server.requests[self.path] <= int(parts[1]):
                return self._reply(503, b"try again\n")
            parts = parts[2:]
        cut = int(parts[1]) if parts[0] == "cut" else None  # /cut/N/: only N bytes, on every request
        if cut is not None:
            parts = parts[2:]
        drop = parts[0] == "drop" and self.server.requests[self.path] == 1
        if parts[0] == "drop":
            parts = parts[1:]
        path = Path(self.server.root, *parts)
        if not path.is_file():
            return self._reply(404, b"not found\n")
        self._send_file(path.read_bytes(), drop, cut)

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_file(self, data: bytes, drop: bool, cut: int | None = None) -> None:
        start = 0
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes=") and ranged.endswith("-"):
            start = int(ranged[6:-1])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if drop or cut is not None:
            self.wfile.write(body[: len(body) // 2 if cut is None else max(0, cut - start)])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)


class FileServer(http.server.ThreadingHTTPServer):
    """Serves `root` on http://127.0.0.1:PORT in a daemon thread; `requests` counts requests per path."""

    daemon_threads = True

    def __init__(self, root: str | os.PathLike):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = Path(root)
        self.requests: Counter[str] = Counter()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(timeout=5)


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    """Return once 127.0.0.1:port accepts connections; RuntimeError after `timeout` or if proc died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server process exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout} s")


def start_moto(port: int, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start moto's S3 server on 127.0.0.1:port in its own session; waits until it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, **(env or {})})
    try:
        wait_for_port(port, proc=proc)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def stop_process(proc: subprocess.Popen) -> None:
    """Kill `proc`'s whole session and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)
