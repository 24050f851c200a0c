"""A sender or a receiver of the plain schemes (zpush, zpub, ...), as a separate process for tests.

    python stream_peer.py serve URL --epochs E --batches N [--size BYTES] [--every S] [--idle S]
                                    [--sndhwm H] [--liveness S] [--first-epoch F]
    python stream_peer.py receive URL --count N [--every S] [--rcvhwm H]

The server sends E epochs of N batches `[uint8 (BYTES,) filled with i % 256, int32 [epoch, i]]`
through `Connection.serve` (one epoch per call, `--every` s between batches, `--idle` s before the
last batch of each epoch), then closes. Its stdout gets JSON lines: {"ready": addresses} once
connected, {"epoch": e} after each epoch, {"closed": true} after close, or {"error": class, "text":
..., "undelivered": n} and exit status 3 when close (or anything) raised.
The receiver prints {"got": [epoch, i]} per batch (flushed) and, after `--count` batches, sleeps
until it is killed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from tensorcom import Connection


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def batches(args: argparse.Namespace, epoch: int):
    for i in range(args.batches):
        if i == args.batches - 1 and args.idle:
            time.sleep(args.idle)
        yield [np.full(args.size, i % 256, np.uint8), np.array([epoch, i], np.int32)]
        time.sleep(args.every)


def serve(args: argparse.Namespace) -> None:
    conn = Connection(args.url, sndhwm=args.sndhwm, liveness=args.liveness)
    try:
        say(ready=conn.addresses)
        conn.epoch_number = args.first_epoch
        for epoch in range(args.first_epoch, args.first_epoch + args.epochs):
            conn.serve(batches(args, epoch))
            say(epoch=epoch)
        conn.close()
        say(closed=True)
    except Exception as exc:
        say(error=type(exc).__name__, text=str(exc), undelivered=getattr(exc, "undelivered", None))
        sys.exit(3)


def receive(args: argparse.Namespace) -> None:
    conn = Connection(args.url, rcvhwm=args.rcvhwm)
    for _ in range(args.count):
        batch = conn.recv()
        say(got=batch[1].tolist())
        time.sleep(args.every)
    time.sleep(3600)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["serve", "receive"])
    parser.add_argument("url")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--first-epoch", type=int, default=0)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--every", type=float, default=0.0)
    parser.add_argument("--idle", type=float, default=0.0)
    parser.add_argument("--sndhwm", type=int, default=10)
    parser.add_argument("--rcvhwm", type=int, default=10)
    parser.add_argument("--liveness", type=float, default=10.0)
    parser.add_argument("--count", type=int, default=1)
    args = parser.parse_args()
    (serve if args.role == "serve" else receive)(args)


if __name__ == "__main__":
    main()
