"""Autoscaled augmentation against fixed `-w`: a trainer-like consumer of fixed step time.

A consumer (this process) binds zpull, takes a batch, then "trains" for --step seconds (40 ms by
default, a sleep: the GPU's time), against serve-imagenet-dir (a real subprocess) on the ImageNet-like
folder of benchmarks/pipeline.py (JPEGs of about 500x375, RandomResizedCrop(224) + flip, batch 64).

First the grid of fixed settings the machine allows (-w 0..3 with one publisher, and -P x -w with
P x max(w, 1) <= cores): each runs --warmup seconds, then is measured --measure seconds: img/s at
the consumer and the server's CPU (every process of its group, read from /proc) as cores busy and
CPU-ms per image. Then `-w auto`: run --auto seconds, its rate every second; printed: the time until
its 3-second rate reaches 95% of the best fixed setting's, its final rate and CPU (the last --measure
seconds) against that best setting's rate and CPU + 10%.

    ./run bench benchmarks/autoscale.py            # full run
    ./run bench benchmarks/autoscale.py --quick    # under 5 minutes
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline import BATCH, SIZE, check_batch, free_port, make_dataset  # noqa: E402  benchmarks/pipeline.py

TICK = os.sysconf("SC_CLK_TCK")


def group_cpu(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of process group `pgid`, from /proc."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stream:
                fields = stream.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state ppid pgrp ... utime(11) stime(12)
            total += (int(fields[11]) + int(fields[12])) / TICK
    return total


class Run:
    """serve-imagenet-dir with `options` (a subprocess in a group of its own) -> this consumer."""

    def __init__(self, root: Path, options: list[str], step: float):
        from tensorcom import Connection

        self.port, self.step = free_port(), step
        self.conn = Connection(f"zpull://127.0.0.1:{self.port}", timeout=120)
        command = [sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", "-d", str(root), "-b", str(BATCH),
                   "--size", str(SIZE), "-r", "0", *options, f"zpush://127.0.0.1:{self.port}"]
        self.said = tempfile.TemporaryFile("w+")  # not a pipe: a server that talks never blocks on it
        self.server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.said,
                                       start_new_session=True)
        self.batches = self._epochs()

    def _epochs(self):
        while True:  # the server runs epochs back to back; each `for` over the Connection is one
            yield from self.conn

    def take(self, seconds: float) -> list[tuple[float, int]]:
        """(arrival time, images) of the batches taken in `seconds`, each followed by a step."""
        arrivals, end = [], time.perf_counter() + seconds
        while time.perf_counter() < end:
            images, labels = next(self.batches)
            arrivals.append((time.perf_counter(), check_batch(images, labels)))
            time.sleep(self.step)
        return arrivals

    def close(self) -> str:
        """Stop the server's group; returns what it said on stderr."""
        try:
            os.killpg(self.server.pid, signal.SIGTERM)
            self.server.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.server.pid, signal.SIGKILL)
            self.server.wait()
        self.conn.close()
        self.said.seek(0)
        return self.said.read()


def measure(root: Path, options: list[str], args: argparse.Namespace) -> dict:
    """One fixed setting: img/s, cores busy and CPU-ms per image over --measure s after --warmup s."""
    run = Run(root, options, args.step)
    try:
        run.take(args.warmup)
        cpu0, t0 = group_cpu(run.server.pid), time.perf_counter()
        arrivals = run.take(args.measure)
        cpu, wall = group_cpu(run.server.pid) - cpu0, time.perf_counter() - t0
    finally:
        run.close()
    images = sum(n for _, n in arrivals)
    row = {"setting": " ".join(options), "rate": images / wall, "cores": cpu / wall, "ms": 1000 * cpu / max(images, 1)}
    print(f"  {row['setting']:>10}: {row['rate']:6.0f} img/s, {row['cores']:.2f} cores, {row['ms']:.1f} CPU-ms/img",
          flush=True)
    return row


def rolling(arrivals: list[tuple[float, int]], start: float, span: float = 3.0) -> list[tuple[float, float]]:
    """(seconds since `start`, img/s over the `span` seconds before) at every whole second."""
    out, second = [], span
    while arrivals and start + second <= arrivals[-1][0]:
        images = sum(n for t, n in arrivals if start + second - span < t <= start + second)
        out.append((second, images / span))
        second += 1.0
    return out


def autoscaled(root: Path, args: argparse.Namespace, best: dict) -> dict:
    """-w auto for --auto s: time to 95% of the best fixed rate, final rate and CPU, worker changes."""
    run = Run(root, ["-w", "auto"], args.step)
    start = time.perf_counter()
    try:
        arrivals = run.take(args.auto - args.measure)
        cpu0, t0 = group_cpu(run.server.pid), time.perf_counter()
        final = run.take(args.measure)
        cpu, wall = group_cpu(run.server.pid) - cpu0, time.perf_counter() - t0
    finally:
        said = run.close()
    rates = rolling(arrivals + final, start)
    reached = next((second for second, rate in rates if rate >= 0.95 * best["rate"]), None)
    images = sum(n for _, n in final)
    changes = [line for line in said.splitlines() if "(auto)" in line]
    return {"reached": reached, "rate": images / wall, "cores": cpu / wall, "ms": 1000 * cpu / max(images, 1),
            "changes": changes}


def grid(cores: int) -> list[list[str]]:
    """The fixed settings: -w 0..3, then -P 2.. x -w with P x max(w, 1) <= cores."""
    settings = [["-w", str(w)] for w in range(4)]
    for parallel in range(2, cores + 1):
        for workers in range(0, cores // parallel + 1):
            if parallel * max(workers, 1) <= cores:
                settings.append(["-P", str(parallel), "-w", str(workers)])
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (under 5 minutes in all)")
    parser.add_argument("--step", type=float, default=0.04, help="the consumer's step per batch, s (default 0.04)")
    parser.add_argument("--images", type=int, default=640, help="images in the folder (default 640)")
    args = parser.parse_args()
    args.warmup, args.measure, args.auto = (4.0, 8.0, 60.0) if args.quick else (8.0, 20.0, 90.0)
    cores = len(os.sched_getaffinity(0))
    root = make_dataset(args.images)
    print(f"consumer step {1000 * args.step:.0f} ms per batch of {BATCH} (at most {BATCH / args.step:.0f} img/s); "
          f"{cores} cores; load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = [measure(root, setting, args) for setting in grid(cores)]
    best = max(rows, key=lambda row: row["rate"])
    auto = autoscaled(root, args, best)
    print("\n| setting | img/s | cores busy | CPU-ms/img |\n|---|---:|---:|---:|")
    for row in rows:
        mark = " (best)" if row is best else ""
        print(f"| {row['setting']}{mark} | {row['rate']:.0f} | {row['cores']:.2f} | {row['ms']:.1f} |")
    print(f"| -w auto (last {args.measure:.0f} s) | {auto['rate']:.0f} | {auto['cores']:.2f} | {auto['ms']:.1f} |")
    reached = "never" if auto["reached"] is None else f"{auto['reached']:.0f} s"
    print(f"\n-w auto: 95% of the best fixed rate ({0.95 * best['rate']:.0f} img/s) reached after {reached} "
          f"(limit 60 s); final {auto['rate'] / best['rate']:.0%} of its rate at "
          f"{auto['cores'] / max(best['cores'], 1e-9):.0%} of its CPU (limit 110%)")
    print("worker changes: " + (", ".join(line.strip() for line in auto["changes"]) or "none"))


if __name__ == "__main__":
    main()
