"""How soon a restarted job of a hyper-parameter search is back on the live zshare stream, against
restarting the whole search.

    python benchmarks/resume.py [--samples 4000] [--batch 8] [--cost-ms 2] [--jobs 3] [--kill-at 100]
                                [--away 2] [--replay 16] [--json]

tensorcom.serve runs a pipeline whose every sample costs `cost_ms` of CPU (a numpy loop standing in
for decoding) in 2 portion processes, to zshare, for `jobs` jobs (processes). Job 0 saves its
consumer state after every batch; it is SIGKILLed after `kill_at` batches and restarted from that
state `away` seconds later, while the server and the other jobs go on. Every job logs when it got
each batch. Measured:

  * catch-up: from the restart (process start) until the restarted job has every batch that the
    stream had produced before it came back (the batches it lacked, from the replay buffer or made
    again by the catch-up process); with the batches it got and the other jobs' rate meanwhile;
  * whole search: a fresh server and `jobs` fresh jobs, from the start until the stream is back at
    the position it had when job 0 came back (what restarting everything costs before any job
    makes progress again; each job's own training since its checkpoint comes on top).

Prints a table (or one JSON object with --json). The machine's 2 cores are shared by everything.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import socket
import tempfile
import threading
import time

import numpy as np


def costly(i: int, cost_ms: float = 2.0) -> dict:
    """Sample `i`, after `cost_ms` of CPU."""
    end = time.thread_time() + cost_ms / 1000
    x = np.float64(i)
    while time.thread_time() < end:
        x = np.sqrt(x * x + 1.0)
    return {"id": np.int64(i)}


def make_pipeline(samples: int, batch: int, cost_ms: float):
    import functools

    from tensorcom.pipeline import Pipeline

    return Pipeline(range(samples)).map(functools.partial(costly, cost_ms=cost_ms)).batch(batch)


def job(url: str, log: str, state: str | None, die_after: int, resume: bool) -> None:
    """A job: take the epoch, logging (time, first id) per batch; with `state`, checkpoint after each."""
    from tensorcom import Connection
    from tensorcom.transport.resume import save_state

    with open(log, "a") as out:
        out.write(json.dumps({"start": time.time()}) + "\n")
        conn = Connection(url, liveness=1.0, credit=2)
        if resume:
            with open(state) as stream:
                conn.load_state_dict(json.load(stream))
        for count, batch in enumerate(conn, 1):
            out.write(json.dumps({"t": time.time(), "id": int(batch["id"][0])}) + "\n")
            out.flush()
            if state is not None:
                save_state(conn.state_dict(), state)
            if count == die_after:
                os.kill(os.getpid(), signal.SIGKILL)
        conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serving(args, port: int) -> tuple[threading.Thread, dict]:
    from tensorcom.pipeline.serving import serve

    result: dict = {}

    def run():
        try:
            result["stats"] = serve(make_pipeline(args.samples, args.batch, args.cost_ms), f"zshare://127.0.0.1:{port}",
                                    workers=2, epochs=1, min_consumers=args.jobs, report=None,
                                    sharing={"replay": args.replay, "liveness": 1.0})
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def records(path: str) -> list[dict]:
    with open(path) as stream:
        return [json.loads(line) for line in stream]


def run_jobs(args, tmp: str, tag: str, restart: bool) -> tuple[dict, list[str]]:
    """One serve and `jobs` jobs (job 0 killed and restarted when `restart`); the logs' paths."""
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    url = f"zjoin://127.0.0.1:{port}"
    thread, result = serving(args, port)
    logs = [os.path.join(tmp, f"{tag}-{i}.jsonl") for i in range(args.jobs)]
    state = os.path.join(tmp, f"{tag}.state")
    procs = [ctx.Process(target=job, args=(url, logs[0], state, args.kill_at if restart else 0, False))]
    procs += [ctx.Process(target=job, args=(url, log, None, 0, False)) for log in logs[1:]]
    for proc in procs:
        proc.start()
    if restart:
        procs[0].join(120)
        time.sleep(args.away)  # a preempted job comes back after a while
        procs.append(ctx.Process(target=job, args=(url, logs[0], state, 0, True)))
        procs[-1].start()
    for proc in procs:
        proc.join(300)
    thread.join(300)
    if "error" in result:
        raise result["error"]
    return result["stats"], logs


def catch_up_figures(logs: list[str]) -> dict:
    """From the restarted job's log and the others': when it came back, when it had everything the
    stream had produced before that, and the position the stream had then."""
    mine = records(logs[0])
    restart = [r["start"] for r in mine if "start" in r][1]
    first_seen: dict[int, float] = {}
    for log in logs[1:]:
        for r in records(log):
            if "t" in r:
                first_seen[r["id"]] = min(first_seen.get(r["id"], r["t"]), r["t"])
    before = {i for i, t in first_seen.items() if t < restart}
    after = [r for r in mine if "t" in r and r["t"] >= restart]
    got = {r["id"]: r["t"] for r in after}
    lacked = [i for i in before if i in got]
    back = max((got[i] for i in lacked), default=restart)
    killed = max(r["t"] for r in mine if "t" in r and r["t"] < restart)
    times = [r["t"] for r in records(logs[1]) if "t" in r]
    earlier = [t for t in times if t <= killed]
    during = [t for t in times if restart <= t <= back]
    return {"position": len(before), "lacked": len(lacked), "catch_up_s": back - restart,
            "others_before": len(earlier) / max(killed - earlier[0], 1e-9) if earlier else 0.0,
            "others_during": len(during) / max(back - restart, 1e-9)}


def whole_search_seconds(logs: list[str], position: int) -> float:
    """From the fresh jobs' start until the stream reached `position` batches."""
    start = min(r["start"] for log in logs for r in records(log) if "start" in r)
    seen = sorted({r["id"]: r["t"] for log in logs for r in records(log) if "t" in r}.values())
    return seen[min(position, len(seen)) - 1] - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("samples", 4000), ("batch", 8), ("cost_ms", 2.0), ("jobs", 3), ("kill_at", 100),
                          ("away", 2.0), ("replay", 16)):
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tc-resume-bench-") as tmp:
        stats, logs = run_jobs(args, tmp, "catch-up", restart=True)
        figures = catch_up_figures(logs)
        _, fresh = run_jobs(args, tmp, "whole", restart=False)
        figures["whole_search_s"] = whole_search_seconds(fresh, figures["position"])
    figures["consumers"] = len(stats.get("consumers", []))
    if args.json:
        print(json.dumps(figures))
        return
    print("| stream position at the restart (batches) | batches the job lacked | catch-up: back on the live "
          "stream (s) | another job before the kill / during the catch-up (batches/s) | whole search back at that "
          "position (s) |")
    print("|---|---|---|---|---|")
    print(f"| {figures['position']} | {figures['lacked']} | {figures['catch_up_s']:.2f} | "
          f"{figures['others_before']:.1f} / {figures['others_during']:.1f} | {figures['whole_search_s']:.2f} |")


if __name__ == "__main__":
    main()
