"""How fast a spawned worker starts: what it imports, the CPU that costs, and start() to first batch.

Three kinds of spawned child, each run --repeats times (2 processes a run), in order:

  (bare)     a multiprocessing spawn child that runs a stdlib function: the interpreter and
             multiprocessing alone, what every child pays whatever tensorcom does
  (parallel) Pipeline(range(64)).map(probe).batch(4).parallel(2): portion workers
  (serve)    tensorcom.serve(the same pipeline without parallel, "zpush://...", workers=2) to a
             tensorcom Connection in this process

`probe` (this module: stdlib only, so that a child importing this script as its main module imports
nothing of tensorcom on that account) records, at a child's first sample, the child's CPU seconds
(time.process_time: interpreter start, imports, unpickling), the wall time and its sys.modules. The
table gives, per kind, the medians of: the child's CPU ms at its first sample, the same less the bare
child's (what tensorcom and the pipeline add), the number of modules loaded, start to the first
batch in this process (ms), and which of the watched heavy modules (http.client, asyncio,
zmq.asyncio, numpy, ...) the children had loaded.

    .venv/bin/python benchmarks/worker_start.py [--repeats 5] [--modules]   # --modules: list them all
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

WATCHED = ("http.client", "urllib.request", "email", "asyncio", "zmq", "zmq.asyncio", "numpy", "tensorcom.tenbin",
           "tensorcom.shards", "tensorcom.shards.fields", "tensorcom.transport.ends", "tensorcom.pipeline._pipeline",
           "tensorcom.transport.connection", "ssl", "json", "tarfile")
OUT_ENV = "WORKER_START_DIR"


def probe(sample):
    """The pipeline's map function, int -> {"i": int}: at a child's first sample, it writes what the
    child has to $WORKER_START_DIR."""
    global _seen
    if not globals().get("_seen"):
        _seen = True
        record = {"pid": os.getpid(), "cpu": time.process_time(), "wall": time.time(), "modules": list(sys.modules)}
        with open(os.path.join(os.environ[OUT_ENV], f"{os.getpid()}.json"), "w") as f:
            json.dump(record, f)
    return {"i": sample}


def bare_child() -> None:
    probe(0)


def run_bare(count: int = 2) -> float:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    start = time.time()
    procs = [ctx.Process(target=bare_child) for _ in range(count)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    return start


def run_parallel() -> tuple[float, float]:
    from tensorcom.pipeline import Pipeline

    pipeline = Pipeline(range(64)).map(probe).batch(4).parallel(2)
    start = time.time()
    items = iter(pipeline)
    next(items)
    first = time.time()
    for _ in items:
        pass
    pipeline.close() if hasattr(pipeline, "close") else None
    return start, first


def run_serve() -> tuple[float, float]:
    import socket

    from tensorcom.pipeline import Pipeline, serve
    from tensorcom.transport.connection import Connection

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pipeline = Pipeline(range(64)).map(probe).batch(4)
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        start = time.time()
        thread = threading.Thread(target=serve, args=(pipeline, f"zpush://127.0.0.1:{port}"),
                                  kwargs={"workers": 2, "report": None}, daemon=True)
        thread.start()
        batches = iter(conn)
        next(batches)
        first = time.time()
        for _ in batches:
            pass
        thread.join(60)
    return start, first


def one_run(kind: str) -> dict:
    """Run `kind` once; the children's records and start to first batch (ms)."""
    with tempfile.TemporaryDirectory() as out:
        os.environ[OUT_ENV] = out
        if kind == "bare":
            start = run_bare()
            first = None
        else:
            start, first = run_parallel() if kind == "parallel" else run_serve()
        records = []
        for name in os.listdir(out):
            with open(os.path.join(out, name)) as f:
                records.append(json.load(f))
    if first is None:
        first = min(r["wall"] for r in records)
    return {"records": records, "first_ms": (first - start) * 1e3}


def summary(kind: str, runs: list[dict], bare_cpu: float | None) -> dict:
    records = [r for run in runs for r in run["records"]]
    cpu = statistics.median(r["cpu"] for r in records) * 1e3
    modules = [set(r["modules"]) for r in records]
    return {"kind": kind, "cpu_ms": cpu, "extra_ms": None if bare_cpu is None else cpu - bare_cpu,
            "modules": statistics.median(len(m) for m in modules),
            "first_ms": statistics.median(run["first_ms"] for run in runs),
            "watched": [name for name in WATCHED if any(name in m for m in modules)],
            "all": sorted(set.union(*modules))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--modules", action="store_true", help="list every module each kind's children loaded")
    args = parser.parse_args()
    rows, bare_cpu = [], None
    for kind in ("bare", "parallel", "serve"):
        runs = [one_run(kind) for _ in range(args.repeats)]
        row = summary(kind, runs, bare_cpu)
        if kind == "bare":
            bare_cpu = row["cpu_ms"]
        rows.append(row)
    print(f"{'kind':9} {'child CPU ms':>12} {'- bare ms':>10} {'modules':>8} {'start->1st batch ms':>20}  watched modules loaded")
    for row in rows:
        extra = "" if row["extra_ms"] is None else f"{row['extra_ms']:.0f}"
        print(f"{row['kind']:9} {row['cpu_ms']:12.0f} {extra:>10} {row['modules']:8.0f} {row['first_ms']:20.0f}  "
              f"{' '.join(row['watched']) or '-'}")
    if args.modules:
        for row in rows:
            print(f"\n{row['kind']}: {' '.join(row['all'])}")


if __name__ == "__main__":
    main()
