"""Run by test_dropped_connections.py in a subprocess (what it tries could freeze a process):

    python dropping.py many TRANSPORT DIR SCHEME...  # 50 dropped Connections of each SCHEME, then pairs deliver 20
    python dropping.py symptom                       # 0.1's README style: three unclosed receivers in turn
    python dropping.py warns                         # one Connection closed, one dropped
    python dropping.py fork                          # a forked child drops its copies of a working pair

Prints one `key value` line per fact the test checks, then `done`. Every receive has a timeout, so a
frozen I/O thread shows as a RecvTimeout (printed), never as a hang of the test.
"""

from __future__ import annotations

import gc
import itertools
import os
import socket
import sys
import threading
import warnings

import numpy as np

import tensorcom
from tensorcom.transport import _sockets

PEERS = {"zpush": "zpull", "zrpush": "zrpull", "zpub": "zsub", "zrpub": "zrsub", "zshare": "zjoin",
         "zsplit": "zjoin"}
PEERS.update({receiver: sender for sender, receiver in list(PEERS.items()) if receiver != "zjoin"})
PEERS["zjoin"] = "zshare"
BINDS = {"zpull", "zrpush", "zpub", "zrsub", "zshare", "zsplit"}
SENDS = {"zpush", "zrpush", "zpub", "zrpub", "zshare", "zsplit"}
OPTIONS = dict(timeout=20, liveness=5.0)
_names = itertools.count()


def batch(i: int) -> list:
    return [np.full((4, 4), i, dtype="float32"), np.arange(4, dtype="int16")]


def dead_address(transport: str, folder: str) -> str:
    """An address nobody listens at."""
    if transport == "ipc":
        return os.path.join(folder, f"none{next(_names)}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def fresh_address(transport: str, folder: str) -> str:
    """An address to bind: any free port, or a new ipc path."""
    return os.path.join(folder, f"s{next(_names)}") if transport == "ipc" else "127.0.0.1:*"


def url(scheme: str, transport: str, address: str) -> str:
    return f"{scheme}+{transport}://{address}" if transport == "ipc" else f"{scheme}://{address}"


def pair(scheme: str, transport: str, folder: str) -> tuple:
    """(sender, receiver): `scheme` and its peer, the binding one first made, connected."""
    peer = PEERS[scheme]
    binder, connector = (scheme, peer) if scheme in BINDS else (peer, scheme)
    bound = tensorcom.Connection(url(binder, transport, fresh_address(transport, folder)), **OPTIONS)
    address = bound.addresses[0].split("://", 1)[1]
    connected = tensorcom.Connection(url(connector, transport, address), **OPTIONS)
    return (bound, connected) if binder in SENDS else (connected, bound)


def drop_with_traffic(scheme: str, transport: str, folder: str) -> None:
    """A pair with batches in flight: three sent, at most one received (not for PUB/SUB, which
    drops for a subscriber that is not connected yet), both dropped."""
    sender, receiver = pair(scheme, transport, folder)
    for i in range(3):
        sender.send(batch(i))
    if "pub" not in sender.endpoints[0].scheme:
        receiver.recv()


def drop_alone(scheme: str, transport: str, folder: str, cycle: bool) -> None:
    """One Connection with no peer (binding, or connecting to nothing); `cycle`: it references
    itself, so only the cycle collector can free it."""
    address = fresh_address(transport, folder) if scheme in BINDS else dead_address(transport, folder)
    conn = tensorcom.Connection(url(scheme, transport, address), **OPTIONS)
    if cycle:
        conn.myself = conn


def many(transport: str, folder: str, *schemes: str) -> None:
    """50 Connections of each scheme dropped (every fifth with a collection after it), then a fresh
    pair of each scheme and its peer delivers 20 batches (in order; PUB/SUB: 20 of those published)."""
    for scheme in schemes:
        for i in range(50):
            if i % 3 == 0:
                drop_with_traffic(scheme, transport, folder)
            else:
                drop_alone(scheme, transport, folder, cycle=i % 3 == 2)
            if i % 5 == 0:
                gc.collect()
    for scheme in schemes:
        deliver(scheme, transport, folder)


def deliver(scheme: str, transport: str, folder: str) -> None:
    """A fresh pair of `scheme` and its peer sends 20 batches; prints `delivered SCHEME OK NUMBERS`."""
    sender, receiver = pair(scheme, transport, folder)
    lossy = "pub" in sender.endpoints[0].scheme
    try:
        got = published(sender, receiver) if lossy else [exchange(sender, receiver, i) for i in range(20)]
    except tensorcom.errors.TensorcomError as exc:
        print("error", type(exc).__name__, exc, flush=True)
        got = []
    ok = len(got) == 20 and got == sorted(set(got)) and (lossy or got == list(range(20)))
    print("delivered", scheme, ok, ",".join(map(str, got)), flush=True)
    receiver.close()
    try:  # what was sent was received; the stream's end has no consumer left to go to
        sender.close(linger=0)
    except tensorcom.errors.Undelivered:
        pass


def exchange(sender, receiver, i: int) -> int:
    sender.send(batch(i))
    return int(receiver.recv()[0][0, 0])


def published(sender, receiver) -> list:
    """Lossy PUB/SUB (a subscriber misses what is sent before it is connected, or while its queue
    is full): batches published from a thread until `receiver` got 20; their numbers."""
    stop = threading.Event()

    def publish() -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            sender.send(batch(i))
            stop.wait(0.002)  # pace the stream, as a real server's loading does

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        return [int(receiver.recv()[0][0, 0]) for _ in range(20)]
    finally:
        stop.set()
        thread.join()


def report_after(work, *args) -> None:
    """Run `work(*args)` counting ResourceWarnings; print the counts and whether every socket and
    the shared context were released once everything was collected."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        work(*args)
        gc.collect()
    texts = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    print("unclosed_connections", sum(t.startswith("unclosed Connection") for t in texts), flush=True)
    print("unclosed_sockets", sum(t.startswith("Unclosed socket") for t in texts), flush=True)
    print("context_released", _sockets._context is None and not _sockets._kept, flush=True)


def serve_until(stop: threading.Event, address: str, ready: threading.Event) -> None:
    """A zpub server (tensorcom 0.1's serve-imagenet-dir, in a thread) sending until `stop`."""
    with tensorcom.Connection(f"zpub://{address}") as server:
        ready.set()
        for i in itertools.count():
            if stop.is_set():
                return
            server.send(batch(i))
            stop.wait(0.001)  # pace the stream, as a real server's loading does


def receive_one(address: str) -> int:
    """0.1's README: a training job's Connection, made in a function and never closed."""
    training = tensorcom.Connection(f"zsub://{address}", timeout=20)
    training.myself = training  # as if a cycle held it: collected late, or never
    return int(training.recv()[0][0, 0])


def symptom() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    stop, ready = threading.Event(), threading.Event()
    server = threading.Thread(target=serve_until, args=(stop, address, ready), daemon=True)
    server.start()
    ready.wait(20)
    gc.disable()  # the dropped receivers stay, unreferenced, while the next ones work
    try:
        for call in range(3):
            print("call", call, "received", receive_one(address), flush=True)
    except tensorcom.errors.TensorcomError as exc:
        print("error", type(exc).__name__, exc, flush=True)
    finally:
        gc.enable()
        stop.set()
        server.join(20)


def closed_or_not() -> None:
    """One Connection closed, then one dropped (a ResourceWarning for the second only)."""
    with tensorcom.Connection("zpull://127.0.0.1:*"):
        pass
    tensorcom.Connection("zpull://127.0.0.1:*")


def forked() -> None:
    """A forked child drops its copies of a working pair and exits; the parent's pair still works."""
    import multiprocessing

    sender, receiver = pair("zpush", "tcp", "")
    print("before", exchange(sender, receiver, 1), flush=True)
    child = multiprocessing.get_context("fork").Process(target=drop_copies, args=([sender, receiver],))
    child.start()
    child.join(20)
    print("child_exit", child.exitcode, flush=True)
    print("after", exchange(sender, receiver, 2), flush=True)
    receiver.close()
    sender.close()


def drop_copies(connections: list) -> None:
    connections.clear()
    gc.collect()


if __name__ == "__main__":
    work = {"many": many, "symptom": symptom, "warns": closed_or_not, "fork": forked}[sys.argv[1]]
    report_after(work, *sys.argv[2:])
    print("done", flush=True)
