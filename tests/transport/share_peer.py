"""A server or a consumer of the sharing schemes, as a separate process for tests.

    python share_peer.py serve URL --batches N --epochs E --batch B [--min-consumers K] [--every S]
                                   [--pad BYTES]
    python share_peer.py consume URL --out FILE --passes P [--every S] [--pause-at N --pause S]
                                     [--batch-size B] [--liveness S]

The server sends E epochs of N batches of B sample ids (`{"id": int64 array}`; epoch e, batch i hold
e*10000 + i*B ... + B-1), then closes; its stdout gets one JSON line: the close result or the error.
The consumer appends one JSON line per received batch to FILE (`{"pass": p, "ids": [...]}`, flushed
at once, so a killed consumer leaves what it had) and one line per pass end (`{"end": p}`), then
`{"joined_at": ...}`; an exception is written as `{"error": class name, "text": ...}` and exit 3.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from peer_script import fail, run, say

from tensorcom import Connection


def serve(args: argparse.Namespace) -> None:
    conn = Connection(args.url, min_consumers=args.min_consumers, liveness=args.liveness)
    say(ready=conn.addresses)
    for epoch in range(args.epochs):
        for i in range(args.batches):
            start = epoch * 10000 + i * args.batch
            batch = {"id": np.arange(start, start + args.batch, dtype=np.int64)}
            if args.pad:  # bytes of filler: a batch large enough for the shared-memory handoff
                batch["pad"] = np.zeros(args.pad, np.uint8)
            conn.send(batch, allow64=True)
            time.sleep(args.every)
        conn.end_epoch()
    try:
        conn.close()
        say(closed=True)
    except Exception as exc:
        fail(exc)


def consume(args: argparse.Namespace) -> None:
    options = {"liveness": args.liveness, "credit": args.credit}
    if args.batch_size:
        options["batch_size"] = args.batch_size
    received = 0
    with open(args.out, "a") as out, Connection(args.url, **options) as conn:
        def write(record: dict) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        try:
            for p in range(args.passes):
                for batch in conn:
                    write({"pass": p, "ids": [int(x) for x in batch["id"]]})
                    received += 1
                    if received == args.pause_at:
                        time.sleep(args.pause)
                    time.sleep(args.every)
                write({"end": p})
            write({"joined_at": {k: list(v) for k, v in conn.joined_at.items() if v}})
        except Exception as exc:
            write({"error": type(exc).__name__, "text": str(exc), "at": time.monotonic()})
            raise SystemExit(3) from None


if __name__ == "__main__":
    run({"serve": serve, "consume": consume}, batches=10, epochs=1, batch=4, min_consumers=1, every=0.0, out=None,
        passes=1, pause_at=-1, pause=0.0, batch_size=0, credit=4, liveness=10.0, pad=0)
