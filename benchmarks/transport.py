"""Transport benchmark: Connection zpush→zpull against raw pyzmq PUSH→PULL, in the same run.

    ./run bench benchmarks/transport.py [--batches 200] [--repeats 3] [--transports tcp,ipc]

Batches are [uint8 (64,224,224,3), int32 (64,)] (9.6 MB). The sender runs in a separate (spawned)
process and connects; the receiver (this process) binds, throws away `--warmup` batches, then times
`--batches` more. The baseline is raw pyzmq at its best: the batch as one pre-built frame, sent with
copy=False and received with copy=False, with the same small high-water mark. Connection rows, protocol 2
multipart: `send()` as it is by default (ZeroMQ copies the batch before send() returns, so the caller may
reuse its arrays) and zero-copy, where ownership passes (`send(batch, copy=False)`, what `serve()` and
`tensorcom.serve` do for every batch); for information protocol 1 and single-part messages (zero-copy
sends). Each configuration runs `--repeats` times, interleaved; the table shows the best run of each, the
ratio of the best runs, the median over repeats of the ratio to the raw run just before it, the
receiving process's CPU time and page faults per batch (steadier than rates on a busy machine), and
the sending process's CPU time per batch (where the default's copy shows).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import tempfile
import time

import numpy as np
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from tensorcom.transport.connection import Connection  # noqa: E402

SHAPES = ((64, 224, 224, 3), (64,))


def make_batch() -> list:
    """The benchmark batch: random uint8 images and int32 labels."""
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, SHAPES[0], dtype=np.uint8), np.arange(64, dtype=np.int32)]


def process_cpu() -> float:
    """CPU seconds of this whole process so far, ZeroMQ's I/O thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def raw_sender(address: str, count: int, hwm: int, cpu) -> None:
    """Process body: send the batch as one pre-built frame `count` times, zero-copy; `cpu.value`
    gets the process's CPU seconds per batch."""
    batch = make_batch()
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


def connection_sender(url: str, count: int, hwm: int, protocol: int, multipart: bool, copy: bool, cpu) -> None:
    """Process body: send the batch with Connection.send(batch, copy=copy) `count` times; `cpu.value`
    gets the process's CPU seconds per batch."""
    batch = make_batch()
    conn = Connection(url, sndhwm=hwm, protocol=protocol, multipart=multipart)
    conn.socket.linger = -1  # let the last batches out before closing
    start = process_cpu()
    for _ in range(count):
        conn.send(batch, copy=copy)
    conn.socket.close()
    conn.close()
    cpu.value = (process_cpu() - start) / count


def time_receipts(receive, warmup: int, count: int) -> tuple[float, float, float]:
    """(seconds, receiver CPU seconds per batch, page faults per batch) for `count` calls of `receive`
    after `warmup` untimed ones. CPU and faults cover this whole process, ZeroMQ's I/O thread included."""
    for _ in range(warmup):
        receive()
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    for _ in range(count):
        receive()
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / count
    return seconds, cpu, (after.ru_minflt - before.ru_minflt) / count


def run_raw(address: str, args: argparse.Namespace, ctx) -> tuple:
    """Seconds for raw PUSH→PULL: one frame per batch, copy=False on both sides."""
    context = zmq.Context()
    sock = context.socket(zmq.PULL)
    sock.rcvhwm, sock.linger, sock.rcvtimeo = args.hwm, 0, 60000
    sock.bind(address)
    cpu = ctx.Value("d", float("nan"))
    proc = ctx.Process(target=raw_sender, args=(address, args.warmup + args.batches, args.hwm, cpu))
    proc.start()
    try:
        timed = time_receipts(lambda: sock.recv(copy=False), args.warmup, args.batches)
    finally:
        proc.join(60)
        sock.close()
        context.term()
    return (*timed, cpu.value)


def run_connection(address: str, args: argparse.Namespace, ctx, protocol: int, multipart: bool,
                   copy: bool) -> tuple:
    """Seconds for Connection zpush→zpull with the given protocol, multipart and send copy setting."""
    transport, rest = address.split("://", 1)
    plus = "" if transport == "tcp" else f"+{transport}"
    receiver = Connection(f"zpull{plus}://{rest}", rcvhwm=args.hwm, timeout=60)
    cpu = ctx.Value("d", float("nan"))
    proc = ctx.Process(target=connection_sender, args=(f"zpush{plus}://{rest}", args.warmup + args.batches,
                                                       args.hwm, protocol, multipart, copy, cpu))
    proc.start()
    try:
        timed = time_receipts(receiver.recv, args.warmup, args.batches)
    finally:
        proc.join(60)
        receiver.close()
    return (*timed, cpu.value)


def addresses(transport: str, port: int, tmp: str) -> str:
    """A fresh loopback or ipc address for one run."""
    return f"tcp://127.0.0.1:{port}" if transport == "tcp" else f"ipc://{tmp}/s{port}"


METHODS = [
    ("raw pyzmq, 1 frame", lambda a, args, ctx: run_raw(a, args, ctx)),
    ("Connection.send (v2, multipart; copies: the default)",
     lambda a, args, ctx: run_connection(a, args, ctx, 2, True, True)),
    ("Connection zero-copy (v2, multipart; serve / copy=False)",
     lambda a, args, ctx: run_connection(a, args, ctx, 2, True, False)),
    ("Connection zero-copy (v1, multipart)", lambda a, args, ctx: run_connection(a, args, ctx, 1, True, False)),
    ("Connection (v2, single-part)", lambda a, args, ctx: run_connection(a, args, ctx, 2, False, False)),
]


def main() -> None:
    """Run every method on every transport `--repeats` times, interleaved, and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hwm", type=int, default=4)
    parser.add_argument("--transports", default="tcp,ipc")
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    nbytes = sum(int(np.prod(s)) * (1 if i == 0 else 4) for i, s in enumerate(SHAPES))
    best: dict = {}
    costs: dict = {}  # (transport, method) -> lists of receiver CPU, faults and sender CPU per batch
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
                    for values, value in zip(costs.setdefault(key, ([], [], [])), cost):
                        values.append(value)
                    best[key] = min(best.get(key, float("inf")), seconds)
                    raw = seconds if name == METHODS[0][0] else raw
                    paired.setdefault(key, []).append(raw / seconds)
    print_table(args, nbytes, best, paired, costs)


def median(values: list) -> float:
    return sorted(values)[len(values) // 2]


def print_table(args: argparse.Namespace, nbytes: int, best: dict, paired: dict, costs: dict) -> None:
    """The markdown table: best rate of each method, ratio of bests, median of paired ratios, and the
    receiver's median CPU time and page faults per batch, and the sender's median CPU time per batch."""
    print(f"batch {nbytes / 1e6:.1f} MB, {args.batches} batches timed, best of {args.repeats}, hwm {args.hwm}")
    print("| transport | method | batches/s | GB/s | ratio vs raw (best/best) | median paired ratio "
          "| recv CPU ms/batch | recv page faults/batch | send CPU ms/batch |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for transport in args.transports.split(","):
        raw = best[(transport, METHODS[0][0])]
        for name, _ in METHODS:
            seconds = best[(transport, name)]
            rate = args.batches / seconds
            cpu, faults, send_cpu = costs[(transport, name)]
            print(f"| {transport} | {name} | {rate:.1f} | {rate * nbytes / 1e9:.2f} | {raw / seconds:.2f} "
                  f"| {median(paired[(transport, name)]):.2f} | {median(cpu) * 1e3:.2f} | {median(faults):.0f} "
                  f"| {median(send_cpu) * 1e3:.2f} |")

if __name__ == "__main__":
    main()
