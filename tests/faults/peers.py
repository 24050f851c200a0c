"""A tensorcom server and consumer with sample ids, run inside a namespace by the fault matrix.

    python peers.py serve URL [--batches N] [--batch B] [--first F] [--every S] [--liveness L]
                              [--min-consumers K] [--linger S]
    python peers.py consume URL [--passes P] [--errors E] [--liveness L]

The server sends one epoch of N batches `{"id": int64 array of B sample ids}` (batch i holds
F + i*B ... F + i*B + B-1) over URL (zshare, zsplit, zpush, zrpush, zpub, ...) with `Connection.send`,
one every S seconds, then `end_epoch()` and `close(linger=S)`. It prints JSON lines, flushed:
{"ready": addresses, "sender": its id}, {"sent": n} every 10 batches, then {"closed": true} or
{"error": class, "text": ..., "counts": ...} and exit status 3.

The consumer iterates over URL (zjoin, zpull, zsub, ...) pass after pass until P passes have ended or
E exceptions came (an exception ends a pass too: it is reported and the consumer iterates again, as a
training loop that catches PeerLost would). It prints {"ready": true}, then per batch {"ids": [...], "pass": p,
"dropped": stats.dropped}, per pass end {"end": p, "dropped": ...}, per exception {"error": class,
"text": ..., "senders": [...], "dropped": ...}, and {"done": true} before it exits 0. Every line
carries `dropped`, so a test that kills the consumer still has its last count.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from tensorcom import Connection

SHARING = ("zshare", "zsplit")


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def scheme(url: str) -> str:
    return url.split("://")[0].split("+")[0]


def serve(args: argparse.Namespace) -> None:
    """Send the epoch of ids, then close; report as the module doc says."""
    options = {"min_consumers": args.min_consumers} if scheme(args.url) in SHARING else {}
    try:
        conn = Connection(args.url, liveness=args.liveness, **options)
        say(ready=getattr(conn, "addresses", None), sender=getattr(conn, "sender", None))
        for i in range(args.batches):
            start = args.first + i * args.batch
            conn.send({"id": np.arange(start, start + args.batch, dtype=np.int64)}, allow64=True)
            if i % 10 == 9:
                say(sent=i + 1)
            time.sleep(args.every)
        conn.end_epoch()
        conn.close(linger=args.linger)
        say(closed=True)
    except Exception as exc:
        say(error=type(exc).__name__, text=str(exc), counts=getattr(exc, "counts", None))
        sys.exit(3)


def consume(args: argparse.Namespace) -> None:
    """Iterate until `passes` passes ended, reporting every batch, pass end and exception."""
    conn = Connection(args.url, liveness=args.liveness)
    say(ready=True)
    ended = attempt = 0
    while ended < args.passes and attempt - ended < args.errors:
        try:
            for batch in conn:
                say(ids=[int(x) for x in batch["id"]], dropped=dropped(conn), **{"pass": attempt})
            say(end=attempt, dropped=dropped(conn))
            ended += 1
        except Exception as exc:
            say(error=type(exc).__name__, text=str(exc), senders=sorted(getattr(exc, "senders", None) or []),
                dropped=dropped(conn))
        attempt += 1
    conn.close()
    say(done=True)


def dropped(conn: Connection) -> int:
    return conn.stats.dropped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["serve", "consume"])
    parser.add_argument("url")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--every", type=float, default=0.01)
    parser.add_argument("--liveness", type=float, default=10.0)
    parser.add_argument("--min-consumers", type=int, default=1)
    parser.add_argument("--linger", type=float, default=60.0)
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--errors", type=int, default=20)
    args = parser.parse_args()
    (serve if args.role == "serve" else consume)(args)


if __name__ == "__main__":
    main()
