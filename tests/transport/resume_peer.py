"""A zjoin consumer that checkpoints after every batch, for the restart tests of zshare and zsplit
(test_sharing_resume.py), and the server: tensorcom.serve of the pipeline below.

    python resume_peer.py serve URL [--replay N] [--ray 1]   # 2 portions (processes, or Ray actors),
                                                      # 2 epochs, 3 consumers, liveness 2 s;
                                                      # prints {"served": batches} or {"error": ...} at the end
    python resume_peer.py consume URL --out FILE --state FILE [--passes P] [--die-after N]
                                      [--hold-at N --held F --hold-file F] [--touch F] [--resume 1]
                                      [--wait-for F,F...] [--save-until N]

Per batch it appends {"pass": p, "ids": [...]} to FILE, then writes Connection.state_dict() to the
state file (atomically): a SIGKILL leaves both at the same batch. --die-after N: SIGKILL itself after
its N-th batch. --hold-at N: after its N-th batch create --held and wait until --hold-file exists.
--touch F: create F after the first batch. --resume 1: load the state file before the first pass (a
restarted job). --wait-for: wait until those files exist before joining. --save-until N: the state
file is the checkpoint after batch N (later batches are not saved).
Ends with {"done": true}; an exception is written as {"error": ..., "text": ...} and exit 3.
"""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
from peer_script import fail, run, say

from tensorcom import Connection
from tensorcom.transport.resume import save_state

SAMPLES = 40  # per epoch: ids epoch * 1000 + i


def sample(i):
    return {"id": np.int64(i)}


def make_pipeline():
    """Shuffled per (seed, epoch, portion): a portion's order is the pipeline's, not its ids'. (The
    pipeline layer is imported here: the consumers do without it.)"""
    from tensorcom.pipeline import Pipeline

    return Pipeline(range(SAMPLES)).map(sample).shuffle(8).batch(2)


def wait_for(paths) -> None:
    deadline = time.monotonic() + 60
    while not all(os.path.exists(p) for p in paths) and time.monotonic() < deadline:
        time.sleep(0.02)


def serve(args) -> None:
    from tensorcom.pipeline.serving import serve as serve_pipeline

    options = dict(workers=2, epochs=2, min_consumers=3, report=None, sharing={"replay": args.replay, "liveness": 2.0})
    try:
        if args.ray:  # two Ray actors (a local instance, two CPUs) and the driver's hub with its catch-up worker
            import ray

            from tensorcom.adapters.ray import serve as ray_serve

            ray.init(num_cpus=2, include_dashboard=False)
            result = ray_serve(f"{__file__}:make_pipeline", args.url, **options)
        else:
            result = serve_pipeline(make_pipeline(), args.url, **options)
        say(served=result["batches"])
    except Exception as exc:
        fail(exc)


def consume(args) -> None:
    wait_for(args.wait_for.split(",") if args.wait_for else [])
    conn = Connection(args.url, liveness=2.0, credit=2)
    first = 0
    if args.resume:
        with open(args.state) as stream:
            state = json.load(stream)
        conn.load_state_dict(state)
        first = state["passes"]
    count = 0
    with open(args.out, "a") as out:
        def write(record):
            out.write(json.dumps(record) + "\n")
            out.flush()

        try:
            for p in range(first, args.passes):
                for batch in conn:
                    write({"pass": p, "ids": [int(x) for x in np.atleast_1d(batch["id"])]})
                    count += 1
                    if not args.save_until or count <= args.save_until:
                        save_state(conn.state_dict(), args.state)
                    if count == args.die_after:
                        os.kill(os.getpid(), signal.SIGKILL)
                    if count == 1 and args.touch:
                        open(args.touch, "w").close()
                    if count == args.hold_at:
                        open(args.held, "w").close()
                        wait_for([args.hold_file])
                write({"end": p})
            write({"done": True})
            conn.close()
        except Exception as exc:
            write({"error": type(exc).__name__, "text": str(exc)})
            fail(exc)


if __name__ == "__main__":
    run({"serve": serve, "consume": consume}, replay=16, ray=0, out=None, state=None, passes=2, die_after=0, hold_at=0, hold_file=None, held=None,
        touch=None, resume=0, wait_for=None, save_until=0)
