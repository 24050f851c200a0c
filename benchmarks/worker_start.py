"""How fast a spawned worker starts: what it imports, the CPU that costs, and start() to first batch.

Three kinds of spawned child, each run --repeats times (2 processes a run), in order:

  (bare)     a multiprocessing spawn child that runs a stdlib function: the interpreter and
             multiprocessing alone, what every child pays whatever tensorcom does
  (parallel) Pipeline(range(64)).map(probe).batch(4).parallel(2): portion workers
  (serve)    tensorcom.serve(the same pipeline without parallel, "zpush://...", workers=2) to a
             tensorcom Connection in this process

`probe` (this module, whose top level imports only os, sys and time, so that a child importing this
script as its main module loads nothing more on that account) records, at a child's first sample,
the child's CPU seconds (time.process_time: interpreter start, imports, unpickling), the wall time
and its sys.modules in load order. The table gives, per kind, the medians of: the child's CPU ms at
its first sample; "imports ms": the CPU of importing that child's modules, in its order, in a fresh
interpreter (steadier than the former on a busy machine); the number of modules loaded; start to
the first batch in this process (ms); and which of the watched heavy modules (http.client, asyncio,
zmq.asyncio, numpy, ...) the children had loaded.

    .venv/bin/python benchmarks/worker_start.py [--repeats 5] [--modules]   # --modules: list them all
    PYTHONPATH=/path/to/other/checkout/src .venv/bin/python benchmarks/worker_start.py   # another version
"""

from __future__ import annotations

import os
import sys
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
        with open(os.path.join(os.environ[OUT_ENV], f"{os.getpid()}.txt"), "w") as f:
            f.write(repr(record))
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
    import threading

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
    import ast
    import tempfile

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
                records.append(ast.literal_eval(f.read()))
    if first is None:
        first = min(r["wall"] for r in records)
    return {"records": records, "first_ms": (first - start) * 1e3}


IMPORTS = """
import importlib, sys, time
names = {names!r}
start = time.process_time()
for name in names:
    if name not in sys.modules:
        try:
            importlib.import_module(name)
        except Exception:
            pass
print(time.process_time() - start)
"""


def import_cpu(modules: list[str], repeats: int) -> float:
    """Median CPU ms of importing `modules` (a child's, in its load order) in fresh interpreters."""
    import statistics
    import subprocess

    names = [m for m in modules if m not in ("__main__", "__mp_main__")]
    code = IMPORTS.format(names=names)
    times = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
             for _ in range(repeats)]
    return statistics.median(times) * 1e3


def summary(kind: str, runs: list[dict], repeats: int) -> dict:
    import statistics

    records = [r for run in runs for r in run["records"]]
    cpu = statistics.median(r["cpu"] for r in records) * 1e3
    modules = [set(r["modules"]) for r in records]
    return {"kind": kind, "cpu_ms": cpu, "imports_ms": import_cpu(records[0]["modules"], repeats),
            "modules": statistics.median(len(m) for m in modules),
            "first_ms": statistics.median(run["first_ms"] for run in runs),
            "watched": [name for name in WATCHED if any(name in m for m in modules)],
            "all": sorted(set.union(*modules))}


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--modules", action="store_true", help="list every module each kind's children loaded")
    args = parser.parse_args()
    rows = [summary(kind, [one_run(kind) for _ in range(args.repeats)], args.repeats)
            for kind in ("bare", "parallel", "serve")]
    print(f"{'kind':9} {'child CPU ms':>12} {'imports ms':>10} {'modules':>8} {'start->1st batch ms':>20}  "
          "watched modules loaded")
    for row in rows:
        print(f"{row['kind']:9} {row['cpu_ms']:12.0f} {row['imports_ms']:10.0f} {row['modules']:8.0f} "
              f"{row['first_ms']:20.0f}  {' '.join(row['watched']) or '-'}")
    if args.modules:
        for row in rows:
            print(f"\n{row['kind']}: {' '.join(row['all'])}")


if __name__ == "__main__":
    main()
