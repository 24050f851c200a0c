"""A TCP relay that delays every chunk it forwards: latency for a kernel without netem.

    python relay.py --port 7880 --to 10.250.0.1:7880 --ms 50 --jitter 20

Listens on `--port` of every address, connects each accepted connection to `--to`, and forwards both
ways; each chunk read is written `ms ± jitter` milliseconds (uniform) after it was read, never before
the chunk read before it, so order is kept and the delay of a chunk is at least ms - jitter. An end
of stream is passed on after the data before it; a reset or error on either side aborts both with an
RST. Prints {"listening": port} once it accepts, then {"connection": n} per accepted connection.
Runs until killed (the test's Net kills it).
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import threading
import time
from collections import deque


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


class Direction:
    """One way of a relayed connection: a reader thread stamps chunks, a writer thread sends each when due."""

    def __init__(self, source: socket.socket, sink: socket.socket, ms: float, jitter: float, abort):
        self.source, self.sink, self.ms, self.jitter, self.abort = source, sink, ms, jitter, abort
        self.queue: deque[tuple[float, bytes]] = deque()
        self.ready = threading.Condition()
        self.last_due = 0.0

    def start(self) -> None:
        threading.Thread(target=self.read, daemon=True).start()
        threading.Thread(target=self.write, daemon=True).start()

    def read(self) -> None:
        """Read chunks until the end of stream (queued as b"") or an error (abort both sockets)."""
        while True:
            try:
                chunk = self.source.recv(1 << 16)
            except OSError:
                return self.abort()
            due = max(self.last_due, time.monotonic() + random.uniform(self.ms - self.jitter,
                                                                        self.ms + self.jitter) / 1000)
            self.last_due = due
            with self.ready:
                self.queue.append((due, chunk))
                self.ready.notify()
            if not chunk:
                return

    def write(self) -> None:
        """Send each chunk when due; pass an end of stream on as a shutdown of the sink's writing side."""
        while True:
            with self.ready:
                while not self.queue:
                    self.ready.wait()
                due, chunk = self.queue.popleft()
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                if not chunk:
                    return self.sink.shutdown(socket.SHUT_WR)
                self.sink.sendall(chunk)
            except OSError:
                return self.abort()


def abort_both(a: socket.socket, b: socket.socket):
    """A function that closes both sockets with an RST (SO_LINGER 0), once."""
    done = threading.Lock()

    def abort() -> None:
        if done.acquire(blocking=False):
            for sock in (a, b):
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    sock.close()
                except OSError:
                    pass

    return abort


def relay(client: socket.socket, target: tuple[str, int], ms: float, jitter: float) -> None:
    """Connect to `target` and relay `client` to it both ways with delays (an RST to client on failure)."""
    try:
        upstream = socket.create_connection(target, timeout=10)
        upstream.settimeout(None)
    except OSError:
        return abort_both(client, client)()
    abort = abort_both(client, upstream)
    Direction(client, upstream, ms, jitter, abort).start()
    Direction(upstream, client, ms, jitter, abort).start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--to", required=True, help="HOST:PORT")
    parser.add_argument("--ms", type=float, default=50.0)
    parser.add_argument("--jitter", type=float, default=20.0)
    args = parser.parse_args()
    host, port = args.to.rsplit(":", 1)
    server = socket.create_server(("0.0.0.0", args.port), reuse_port=False)
    say(listening=args.port)
    for n in range(1, 1 << 30):
        client, _ = server.accept()
        say(connection=n)
        relay(client, (host, int(port)), args.ms, args.jitter)


if __name__ == "__main__":
    main()
