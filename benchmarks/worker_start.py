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
and its sys.modules in load order. The table gives, per kind, the best and the median of: the
child's CPU ms at its first sample; "imports ms": the CPU of importing that child's modules, in its
order, in a fresh interpreter; start to the first batch in this process (ms); and the number of
modules a child loaded and which of the watched heavy ones (http.client, asyncio, zmq.asyncio,
numpy, ...). On a shared machine the best is the steadier figure.

    .venv/bin/python benchmarks/worker_start.py [--repeats 5] [--modules]   # --modules: list them all
    .venv/bin/python benchmarks/worker_start.py --versions before=/tmp/old/src,after=src --rounds 3
        # source trees compared (each run with PYTHONPATH=SRC), in turn, samples pooled per version
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


def import_cpu(modules: list[str], repeats: int) -> list[float]:
    """CPU ms of importing `modules` (a child's, in its load order) in each of `repeats` fresh interpreters."""
    import subprocess

    code = IMPORTS.format(names=[m for m in modules if m not in ("__main__", "__mp_main__")])
    return [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout) * 1e3
            for _ in range(repeats)]


def measure(kind: str, repeats: int) -> dict:
    """`repeats` runs of `kind`: every child's CPU ms, imports ms, module count; each run's start to first batch."""
    runs = [one_run(kind) for _ in range(repeats)]
    records = [r for run in runs for r in run["records"]]
    return {"kind": kind, "cpu_ms": [r["cpu"] * 1e3 for r in records],
            "imports_ms": import_cpu(records[0]["modules"], repeats),
            "modules": [len(r["modules"]) for r in records], "first_ms": [run["first_ms"] for run in runs],
            "all": sorted(set().union(*(r["modules"] for r in records)))}


def merged(rows: list[dict]) -> dict:
    """One row of several measurements of the same kind (their samples pooled)."""
    out = {key: [v for row in rows for v in row[key]] for key in ("cpu_ms", "imports_ms", "modules", "first_ms")}
    return {**out, "kind": rows[0]["kind"], "all": sorted(set().union(*(row["all"] for row in rows)))}


def cell(values: list[float]) -> str:
    import statistics

    return f"{min(values):.0f} ({statistics.median(values):.0f})"


def print_table(rows: list[dict], modules: bool) -> None:
    print("best (median) of every child / run / fresh interpreter")
    print(f"{'version':9} {'kind':9} {'child CPU ms':>13} {'imports ms':>11} {'modules':>8} {'start->1st batch ms':>20}"
          "  watched modules loaded")
    for row in rows:
        watched = " ".join(name for name in WATCHED if name in row["all"]) or "-"
        print(f"{row.get('version', '-'):9} {row['kind']:9} {cell(row['cpu_ms']):>13} {cell(row['imports_ms']):>11} "
              f"{max(row['modules']):8} {cell(row['first_ms']):>20}  {watched}")
    if modules:
        for row in rows:
            print(f"\n{row.get('version', '-')} {row['kind']}: {' '.join(row['all'])}")


def compare(versions: str, rounds: int, repeats: int) -> list[dict]:
    """Run this script for each NAME=SRC of `versions` (PYTHONPATH=SRC), interleaved over `rounds`."""
    import json
    import subprocess

    pairs = [item.split("=", 1) for item in versions.split(",")]
    found: dict[tuple[str, str], list[dict]] = {}
    for _ in range(rounds):
        for name, src in pairs:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
            done = subprocess.run([sys.executable, __file__, "--json", "--repeats", str(repeats)], env=env,
                                  capture_output=True, text=True, check=True)
            for row in json.loads(done.stdout):
                found.setdefault((name, row["kind"]), []).append(row)
    return [{**merged(rows), "version": name} for (name, _), rows in found.items()]


def main() -> None:
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each kind (each starts 2 children)")
    parser.add_argument("--versions", help="NAME=SRC,NAME=SRC: compare source trees, run in turn --rounds times")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modules", action="store_true", help="list every module each kind's children loaded")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one version's rows, for --versions
    args = parser.parse_args()
    if args.versions:
        rows = compare(args.versions, args.rounds, args.repeats)
    else:
        rows = [measure(kind, args.repeats) for kind in ("bare", "parallel", "serve")]
    if args.json:
        print(json.dumps(rows))
    else:
        print_table(rows, args.modules)


if __name__ == "__main__":
    main()
