"""A TCP proxy on 127.0.0.1 that tests put between two peers to make network faults on demand.

`TcpProxy(target_port)` listens on a free loopback port (`.port`) and forwards every connection it
accepts to 127.0.0.1:target_port, both ways, from one thread (a selector loop). Faults:

- `reset()`: closes every forwarded connection on both sides, once (FIN; `reset(rst=True)`: RST,
  through SO_LINGER 0). New connections are accepted at once, so a ZeroMQ peer reconnects.
- `stall()`: a short partition: nothing is forwarded and nothing accepted, nothing is closed (no FIN,
  no RST); the kernel's buffers fill and TCP flow control holds the senders. `resume()` ends it.

Tests synchronise on what went through, not on sleeps: `bytes_forwarded` and `connections` (both
monotonic), `wait_for_bytes(n, timeout)` and `wait_for_connections(n, timeout)`, which return when
the count has reached n and raise TimeoutError otherwise. `close()` (or leaving the `with` block)
stops the thread and closes every socket. Only the thread touches the sockets; the methods post
commands to it and wait until it has run them.
"""

from __future__ import annotations

import queue
import selectors
import socket
import struct
import threading
from typing import Callable

CHUNK = 1 << 16  # bytes read at once
HIGH_WATER = 1 << 20  # a direction stops reading while this much waits to be written


class _Link:
    """One forwarded connection: the accepted socket and the socket to the target, each with the
    bytes waiting to be written to it and whether its reading side has ended."""

    def __init__(self, client: socket.socket, upstream: socket.socket):
        self.socks = (client, upstream)
        self.out = {client: bytearray(), upstream: bytearray()}
        self.eof = {client: False, upstream: False}

    def peer(self, sock: socket.socket) -> socket.socket:
        return self.socks[1] if sock is self.socks[0] else self.socks[0]

    def finished(self) -> bool:
        """Both directions ended and flushed."""
        return all(self.eof.values()) and not any(self.out.values())


class TcpProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port` until closed; see the module docstring."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._commands: queue.Queue = queue.Queue()
        self._links: dict[socket.socket, _Link] = {}
        self._registered: dict[socket.socket, int] = {}
        self._stalled = False
        self._closing = False
        self._counts = threading.Condition()
        self.bytes_forwarded = 0
        self.connections = 0
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._set_interest(self._listener, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._loop, name=f"tcp-proxy-{self.port}", daemon=True)
        self._thread.start()

    # --- the test's side ---

    def reset(self, rst: bool = False) -> None:
        """Close every forwarded connection on both sides (with RST when `rst`); keep accepting."""
        self._call(lambda: self._close_all(rst))

    def stall(self) -> None:
        """Stop forwarding and accepting without closing anything, until `resume()`."""
        self._call(lambda: self._set_stalled(True))

    def resume(self) -> None:
        """Forward and accept again after `stall()`, starting with what waited in the buffers."""
        self._call(lambda: self._set_stalled(False))

    def wait_for_bytes(self, n: int, timeout: float = 10.0) -> int:
        """Wait until at least n bytes were forwarded (both directions together); returns the count."""
        return self._wait(lambda: self.bytes_forwarded, n, timeout, "bytes forwarded")

    def wait_for_connections(self, n: int, timeout: float = 10.0) -> int:
        """Wait until at least n connections were accepted in all; returns the count."""
        return self._wait(lambda: self.connections, n, timeout, "connections accepted")

    def close(self) -> None:
        """Stop the thread and close every socket (idempotent)."""
        if self._thread.is_alive():
            self._closing = True
            self._wake()
            self._thread.join(timeout=10)
        for sock in [*self._links, self._listener, self._wake_r, self._wake_w]:
            sock.close()
        self._links.clear()
        self._selector.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _wait(self, read: Callable[[], int], n: int, timeout: float, what: str) -> int:
        with self._counts:
            if not self._counts.wait_for(lambda: read() >= n, timeout=timeout):
                raise TimeoutError(f"proxy :{self.port}: {read()} {what} after {timeout} s, waited for {n}")
            return read()

    def _call(self, command: Callable[[], None], timeout: float = 10.0) -> None:
        """Run `command` on the proxy's thread and wait until it has run."""
        done = threading.Event()
        self._commands.put((command, done))
        self._wake()
        if not done.wait(timeout):
            raise TimeoutError(f"proxy :{self.port}: its thread did not run a command within {timeout} s")

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # --- the thread's side ---

    def _loop(self) -> None:
        while not self._closing:
            for key, mask in self._selector.select(timeout=1.0):
                if key.fileobj is self._wake_r:
                    self._run_commands()
                elif key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj in self._links:
                    self._service(key.fileobj, mask)

    def _run_commands(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while not self._commands.empty():
            command, done = self._commands.get()
            command()
            done.set()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
        except OSError:
            client.close()  # nothing listens there yet: the connecting peer retries
            return
        link = _Link(client, upstream)
        for sock in link.socks:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._links[sock] = link
        self._update(link)
        with self._counts:
            self.connections += 1
            self._counts.notify_all()

    def _service(self, sock: socket.socket, mask: int) -> None:
        link = self._links[sock]
        try:
            if mask & selectors.EVENT_WRITE:
                self._write(link, sock)
            if mask & selectors.EVENT_READ and sock in self._links:
                self._read(link, sock)
        except OSError:
            self._close_link(link, rst=False)
            return
        if link.finished():
            self._close_link(link, rst=False)
        elif sock in self._links:
            self._update(link)

    def _read(self, link: _Link, sock: socket.socket) -> None:
        data = sock.recv(CHUNK)
        peer = link.peer(sock)
        if data:
            link.out[peer] += data
        else:
            link.eof[sock] = True
            if not link.out[peer]:
                peer.shutdown(socket.SHUT_WR)

    def _write(self, link: _Link, sock: socket.socket) -> None:
        sent = sock.send(link.out[sock])
        del link.out[sock][:sent]
        with self._counts:
            self.bytes_forwarded += sent
            self._counts.notify_all()
        if not link.out[sock] and link.eof[link.peer(sock)]:
            sock.shutdown(socket.SHUT_WR)

    def _update(self, link: _Link) -> None:
        """Register each socket of `link` for what it can do now (nothing while stalled)."""
        for sock in link.socks:
            events = 0
            if not self._stalled:
                if not link.eof[sock] and len(link.out[link.peer(sock)]) < HIGH_WATER:
                    events |= selectors.EVENT_READ
                if link.out[sock]:
                    events |= selectors.EVENT_WRITE
            self._set_interest(sock, events)

    def _set_interest(self, sock: socket.socket, events: int) -> None:
        current = self._registered.get(sock, 0)
        if events == current:
            return
        if not events:
            self._selector.unregister(sock)
            del self._registered[sock]
        else:
            (self._selector.modify if current else self._selector.register)(sock, events)
            self._registered[sock] = events

    def _set_stalled(self, stalled: bool) -> None:
        self._stalled = stalled
        self._set_interest(self._listener, 0 if stalled else selectors.EVENT_READ)
        for link in set(self._links.values()):
            self._update(link)

    def _close_all(self, rst: bool) -> None:
        for link in set(self._links.values()):
            self._close_link(link, rst)

    def _close_link(self, link: _Link, rst: bool) -> None:
        for sock in link.socks:
            self._set_interest(sock, 0)
            self._links.pop(sock, None)
            if rst:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()


def inject(proxy: TcpProxy, kind: str, timers: list) -> None:
    """Make fault `kind` on `proxy` now: "reset" (FIN both ways), "rst" (RST), or "stall" (forward
    nothing for 3 s, then resume: a short partition; its Timer is appended to `timers` for the caller
    to cancel at teardown)."""
    if kind == "stall":
        proxy.stall()
        timers.append(threading.Timer(3.0, proxy.resume))
        timers[-1].start()
    else:
        proxy.reset(rst=kind == "rst")
