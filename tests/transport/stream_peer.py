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
import time

import numpy as np
from peer_script import fail, run, say

from tensorcom import Connection


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
        fail(exc, undelivered=getattr(exc, "undelivered", None))


def receive(args: argparse.Namespace) -> None:
    conn = Connection(args.url, rcvhwm=args.rcvhwm)
    for _ in range(args.count):
        batch = conn.recv()
        say(got=batch[1].tolist())
        time.sleep(args.every)
    time.sleep(3600)


if __name__ == "__main__":
    run({"serve": serve, "receive": receive}, epochs=1, first_epoch=0, batches=10, size=1000, every=0.0, idle=0.0,
        sndhwm=10, rcvhwm=10, liveness=10.0, count=1)
