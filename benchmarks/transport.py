"""Transport benchmark: Connection zpush→zpull against raw pyzmq PUSH→PULL, in the same run.

    ./run bench benchmarks/transport.py [--batches 200] [--repeats 3] [--transports tcp,ipc]
    ./run bench benchmarks/transport.py --small [--batches 20000] [--repeats 3]
    ./run bench benchmarks/transport.py --small --profile DIR   # cProfile of sender and receiver

Batches are [uint8 (64,224,224,3), int32 (64,)] (9.6 MB); with `--small`, [uint8 (1008,), int32 (4,)]
(1 KiB), many of them (20,000 timed, high-water mark 1000), where what each message costs apart from its
bytes shows: the wire header, the sessions' log and acknowledgements, Python per call. The sender runs
in a separate (spawned) process and connects; the receiver (this process) binds, throws away `--warmup` batches, then times
`--batches` more. The baseline is raw pyzmq at its best: the batch as one pre-built frame, sent with
copy=False and received with copy=False, with the same small high-water mark. Connection rows, protocol 2
multipart: `send()` as it is by default (ZeroMQ copies the batch before send() returns, so the caller may
reuse its arrays) and zero-copy, where ownership passes (`send(batch, copy=False)`, what `serve()` and
`tensorcom.serve` do for every batch); for information protocol 1 and single-part messages (zero-copy
sends). Each configuration runs `--repeats` times, interleaved; the table shows the best run of each, the
ratio of the best runs, the median over repeats of the ratio to the raw run just before it, the
receiving process's CPU time and page faults per batch (steadier than rates on a busy machine), and
the sending process's CPU time per batch (where the default's copy shows).

What the sessions cost (docs/protocol.md 4.3: a protocol-2 sender over tcp/ipc keeps each message until
its receiver confirms it over an acknowledgement link): the CPU columns of the protocol-2 rows include it,
and a diagnostic row, "sessions off", runs the zero-copy sender with its session machinery detached
through a private attribute (`Connection._end.outbound`; not a public option: a sender cannot turn sessions
off), so its messages carry no `reply` and the receiver opens no link and sends no acknowledgement. The
protocol-1 row is also session-free (protocol 1 has no `reply` field), with its own, leaner header.
With `--small` the raw baseline receives with copy=True (bytes: pyzmq's fastest for small frames).
`--profile DIR` runs each Connection sender and receiver under cProfile and writes DIR/*.prof plus
the top functions of each to stdout; `--methods 2,3` runs only those rows (and raw).

Each sender sends a few batches more than are timed, which the receiver drains untimed: a sender
without sessions (protocol 1, sessions off) was seen to lose the end of its stream when it exits
(docs/benchmarks.md). A stream that still stops short is timed up to its last batch, and the last
column counts the timed batches that never came.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import multiprocessing
import pstats
import os
import resource
import sys
import tempfile
import time

import numpy as np
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from tensorcom.errors import RecvTimeout  # noqa: E402
from tensorcom.transport.connection import Connection  # noqa: E402

SHAPES = ((64, 224, 224, 3), (64,))
SMALL_SHAPES = ((1008,), (4,))  # 1 KiB


def make_batch(shapes: tuple = SHAPES) -> list:
    """The benchmark batch: random uint8 images and int32 labels."""
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, shapes[0], dtype=np.uint8), np.arange(shapes[1][0], dtype=np.int32)]


class Profiled:
    """A context that runs its body under cProfile when `path` is set, writing `path` and printing the
    top functions by internal time."""

    def __init__(self, path: str | None, title: str = ""):
        self.path, self.title = path, title
        self.profile = cProfile.Profile() if path else None

    def __enter__(self):
        if self.profile is not None:
            self.profile.enable()
        return self

    def __exit__(self, *exc) -> None:
        if self.profile is None:
            return
        self.profile.disable()
        self.profile.dump_stats(self.path)
        out = io.StringIO()
        pstats.Stats(self.profile, stream=out).sort_stats("tottime").print_stats(14)
        lines = [line for line in out.getvalue().splitlines() if line.strip()][-16:]
        print(f"## profile {self.title} ({self.path})\n" + "\n".join(lines), flush=True)


def process_cpu() -> float:
    """CPU seconds of this whole process so far, ZeroMQ's I/O thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def raw_sender(address: str, count: int, hwm: int, cpu, shapes: tuple = SHAPES) -> None:
    """Process body: send the batch as one pre-built frame `count` times, zero-copy; `cpu.value`
    gets the process's CPU seconds per batch."""
    batch = make_batch(shapes)
    frame = np.concatenate([a.reshape(-1).view(np.uint8) for a in batch])
    context = zmq.Context()
    sock = context.socket(zmq.PUSH)
    sock.sndhwm, sock.linger = hwm, -1
    sock.connect(address)
    start = process_cpu()
    for _ in range(count):
        sock.send(frame, copy=False)
    sock.close()
    context.term()
    cpu.value = (process_cpu() - start) / count


def connection_sender(url: str, count: int, hwm: int, protocol: int, multipart: bool, copy: bool, cpu,
                      shapes: tuple = SHAPES, sessions: bool = True, profile: str | None = None) -> None:
    """Process body: send the batch with Connection.send(batch, copy=copy) `count` times, then close
    (which waits for the receiver's confirmations); `cpu.value` gets the process's CPU seconds per batch.
    `sessions` False detaches the sender's session machinery (diagnostic; a private attribute)."""
    batch = make_batch(shapes)
    conn = Connection(url, sndhwm=hwm, protocol=protocol, multipart=multipart)
    if not sessions and conn._end.outbound is not None:
        conn._end.outbound._close_link()  # its monitors and acknowledgement socket
        conn._end.outbound = None
    conn.socket.linger = -1  # let the last batches out before closing
    start = process_cpu()
    with Profiled(profile, f"sender {url}"):
        for _ in range(count):
            conn.send(batch, copy=copy)
        conn.close(linger=60)
    cpu.value = (process_cpu() - start) / count


def time_receipts(receive, warmup: int, count: int, profile: str | None = None,
                  title: str = "") -> tuple[float, float, float, int]:
    """(seconds, receiver CPU seconds per batch, page faults per batch, batches missing) for `count`
    calls of `receive` after `warmup` untimed ones. CPU and faults cover this whole process, ZeroMQ's
    I/O thread included. A stream that stops short (the receive times out: a sender without sessions
    lost batches) is timed up to its last batch and the missing ones are counted."""
    got = 0
    with contextlib.suppress(zmq.Again, RecvTimeout):
        for _ in range(warmup):
            receive()
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = last = time.perf_counter()
        with Profiled(profile, title):
            for _ in range(count):
                receive()
                got += 1
                last = time.perf_counter()
    if not got:
        return float("nan"), float("nan"), float("nan"), count
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / got
    return (last - start) * count / got, cpu, (after.ru_minflt - before.ru_minflt) / got, count - got


def run_raw(address: str, args: argparse.Namespace, ctx) -> tuple:
    """Seconds for raw PUSH→PULL: one frame per batch, copy=False on both sides."""
    context = zmq.Context()
    sock = context.socket(zmq.PULL)
    sock.rcvhwm, sock.linger, sock.rcvtimeo = args.hwm, 0, 10000
    sock.bind(address)
    cpu = ctx.Value("d", float("nan"))
    proc = ctx.Process(target=raw_sender, args=(address, args.warmup + args.batches + extra(args), args.hwm, cpu,
                                                   args.shapes))
    proc.start()
    copy = args.small  # small frames: bytes are cheaper than a Frame object
    try:
        timed = time_receipts(lambda: sock.recv(copy=copy), args.warmup, args.batches)
        drain(lambda: sock.recv(copy=copy), lambda ms: setattr(sock, "rcvtimeo", ms))
    finally:
        proc.join(60)
        sock.close()
        context.term()
    return (*timed, cpu.value)


def run_connection(address: str, args: argparse.Namespace, ctx, protocol: int, multipart: bool,
                   copy: bool, sessions: bool = True) -> tuple:
    """Seconds for Connection zpush→zpull with the given protocol, multipart and send copy setting."""
    transport, rest = address.split("://", 1)
    plus = "" if transport == "tcp" else f"+{transport}"
    receiver = Connection(f"zpull{plus}://{rest}", rcvhwm=args.hwm, timeout=10)
    cpu = ctx.Value("d", float("nan"))
    tag = f"{transport}-v{protocol}-{'multi' if multipart else 'single'}-{'copy' if copy else 'zc'}"
    tag += "" if sessions else "-nosession"
    profile = (lambda side: os.path.join(args.profile, f"{tag}-{side}.prof")) if args.profile else (lambda side: None)
    count = args.warmup + args.batches + extra(args)
    proc = ctx.Process(target=connection_sender, args=(f"zpush{plus}://{rest}", count,
                                                       args.hwm, protocol, multipart, copy, cpu, args.shapes,
                                                       sessions, profile("send")))
    proc.start()
    try:
        timed = time_receipts(receiver.recv, args.warmup, args.batches, profile("recv"), f"receiver {tag}")
        drain(receiver.recv, lambda ms: receiver.socket.setsockopt(zmq.RCVTIMEO, ms))
    finally:
        proc.join(60)
        receiver.close()
    return (*timed, cpu.value)


def extra(args: argparse.Namespace) -> int:
    """Batches each sender sends after the timed ones, which the receiver drains untimed: a sender
    without sessions (protocol 1, "sessions off") can lose the end of its stream when it exits
    (measured: up to ~4,000 small batches; see docs/benchmarks.md), and the timed ones must all come."""
    return 4 * args.hwm if args.small else 2 * args.hwm


def drain(receive, set_timeout) -> None:
    """Receive until nothing comes for 2 s (the untimed tail)."""
    set_timeout(2000)
    with contextlib.suppress(zmq.Again, RecvTimeout):
        while True:
            receive()


def addresses(transport: str, port: int, tmp: str) -> str:
    """A fresh loopback or ipc address for one run."""
    return f"tcp://127.0.0.1:{port}" if transport == "tcp" else f"ipc://{tmp}/s{port}"


METHODS = [
    ("raw pyzmq, 1 frame", lambda a, args, ctx: run_raw(a, args, ctx)),
    ("Connection.send (v2, multipart; copies: the default)",
     lambda a, args, ctx: run_connection(a, args, ctx, 2, True, True)),
    ("Connection zero-copy (v2, multipart; serve / copy=False)",
     lambda a, args, ctx: run_connection(a, args, ctx, 2, True, False)),
    ("Connection zero-copy (v2, multipart), sessions off (diagnostic)",
     lambda a, args, ctx: run_connection(a, args, ctx, 2, True, False, sessions=False)),
    ("Connection zero-copy (v1, multipart)", lambda a, args, ctx: run_connection(a, args, ctx, 1, True, False)),
    ("Connection (v2, single-part)", lambda a, args, ctx: run_connection(a, args, ctx, 2, False, False)),
]


def main() -> None:
    """Run every method on every transport `--repeats` times, interleaved, and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=None, help="timed batches (200; --small: 20000)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed batches first (10; --small: 1000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hwm", type=int, default=None, help="high-water marks (4; --small: 1000)")
    parser.add_argument("--transports", default="tcp,ipc")
    parser.add_argument("--small", action="store_true", help="1 KiB batches: per-message costs")
    parser.add_argument("--methods", default="", help="comma-separated row numbers to run (0 = raw, always run)")
    parser.add_argument("--profile", metavar="DIR", help="cProfile each Connection sender and receiver into DIR")
    args = parser.parse_args()
    args.shapes = SMALL_SHAPES if args.small else SHAPES
    for name, normal, small in (("batches", 200, 20000), ("warmup", 10, 1000), ("hwm", 4, 1000)):
        if getattr(args, name) is None:
            setattr(args, name, small if args.small else normal)
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    global METHODS
    if args.methods:
        keep = {0} | {int(i) for i in args.methods.split(",")}
        METHODS = [m for i, m in enumerate(METHODS) if i in keep]
    ctx = multiprocessing.get_context("spawn")
    nbytes = sum(int(np.prod(s)) * (1 if i == 0 else 4) for i, s in enumerate(args.shapes))
    best: dict = {}
    costs: dict = {}  # (transport, method) -> lists of receiver CPU, faults, missing, sender CPU per batch
    paired: dict = {}  # (transport, method) -> ratios to the raw run just before it, one per repeat
    port = 20000 + os.getpid() % 20000
    raw = 1.0  # the raw baseline of the current (repeat, transport); methods start with it
    with tempfile.TemporaryDirectory(prefix="tc-bench-", dir="/tmp") as tmp:
        for _ in range(args.repeats):
            for transport in args.transports.split(","):
                for name, method in METHODS:
                    port += 1
                    seconds, *cost = method(addresses(transport, port, tmp), args, ctx)
                    key = (transport, name)
                    for values, value in zip(costs.setdefault(key, ([], [], [], [])), cost):
                        values.append(value)
                    best[key] = min(best.get(key, float("inf")), seconds) if seconds == seconds else best.get(
                        key, float("inf"))
                    raw = seconds if name == METHODS[0][0] else raw
                    paired.setdefault(key, []).append(raw / seconds)
    print_table(args, nbytes, best, paired, costs)


def median(values: list) -> float:
    values = sorted(v for v in values if v == v)
    return values[len(values) // 2] if values else float("nan")


def print_table(args: argparse.Namespace, nbytes: int, best: dict, paired: dict, costs: dict) -> None:
    """The markdown table: best rate of each method, ratio of bests, median of paired ratios, and the
    receiver's median CPU time and page faults per batch, and the sender's median CPU time per batch."""
    size = f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e5 else f"{nbytes} bytes"
    print(f"batch {size}, {args.batches} batches timed, best of {args.repeats}, hwm {args.hwm}")
    print("| transport | method | batches/s | GB/s | ratio vs raw (best/best) | median paired ratio "
          "| recv CPU ms/batch | recv page faults/batch | send CPU ms/batch | batches missing (all runs) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for transport in args.transports.split(","):
        raw = best[(transport, METHODS[0][0])]
        for name, _ in METHODS:
            seconds = best[(transport, name)]
            rate = args.batches / seconds
            cpu, faults, missing, send_cpu = costs[(transport, name)]
            print(f"| {transport} | {name} | {rate:.1f} | {rate * nbytes / 1e9:.3g} | {raw / seconds:.2f} "
                  f"| {median(paired[(transport, name)]):.2f} | {median(cpu) * 1e3:.{3 if args.small else 2}f} "
                  f"| {median(faults):.{2 if args.small else 0}f} "
                  f"| {median(send_cpu) * 1e3:.{3 if args.small else 2}f} "
                  f"| {sum(missing)} |")

if __name__ == "__main__":
    main()
