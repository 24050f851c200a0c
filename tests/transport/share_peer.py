"""A server or a consumer of the sharing schemes, as a separate process for tests.

    python share_peer.py serve URL --batches N --epochs E --batch B [--min-consumers K] [--every S]
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
import sys
import time

import numpy as np

from tensorcom import Connection


def serve(args: argparse.Namespace) -> None:
    conn = Connection(args.url, min_consumers=args.min_consumers, liveness=args.liveness)
    print(json.dumps({"ready": conn.addresses}), flush=True)
    for epoch in range(args.epochs):
        for i in range(args.batches):
            start = epoch * 10000 + i * args.batch
            conn.send({"id": np.arange(start, start + args.batch, dtype=np.int64)}, allow64=True)
            time.sleep(args.every)
        conn.end_epoch()
    try:
        conn.close()
        print(json.dumps({"closed": True}), flush=True)
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "text": str(exc)}), flush=True)
        sys.exit(3)


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
            sys.exit(3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["serve", "consume"])
    parser.add_argument("url")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--min-consumers", type=int, default=1)
    parser.add_argument("--every", type=float, default=0.0)
    parser.add_argument("--out")
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--pause-at", type=int, default=-1)
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, default=0)
    parser.add_argument("--credit", type=int, default=4)
    parser.add_argument("--liveness", type=float, default=10.0)
    args = parser.parse_args()
    (serve if args.role == "serve" else consume)(args)


if __name__ == "__main__":
    main()
