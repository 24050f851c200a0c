"""Sharing benchmark: K training jobs fed by K loaders, by one zshare server, or by tensorsocket.

K = 1, 2, 4 training-loop stand-ins (separate processes; each iterates `[images uint8 (N,224,224,3),
labels]` batches, reads every byte of each batch as a host-to-device copy would, then sleeps
--step-ms) consume one epoch of serve-imagenet-dir's image pipeline (RandomResizedCrop(224) + flip,
batch 64, `dir_pipeline(workers=W)`, over pipeline.py's JPEG folder under bench-data/) in three setups:

  (a) K independent pipelines: each job iterates its own `dir_pipeline(workers=W, seed=job)` in its
      own process (W spawned workers read, augment and batch; whole batches cross a pipe). This is
      "each job loads for itself" at its cheapest: no server, no socket.
  (b) one pipeline through zshare: ONE `serve-imagenet-dir -d DIR -w W --min-consumers K --epochs 1
      zshare://127.0.0.1:PORT`; each job iterates `Connection("zjoin://127.0.0.1:PORT")` for one epoch.
  (c) tensorsocket 0.0.5: one producer process wraps the same `dir_pipeline(workers=W)` (batches
      turned into torch tensors with `torch.from_numpy`, as its `TensorProducer` wants a loader of
      tensors with a len), waits until K consumers have registered (its heartbeats), then runs one
      epoch; each job iterates a `TensorConsumer(batch_size=64)`. One (c) row per --producer-batch
      value (its producer_batch_size: loader batches collated per broadcast; 8 is its default).
      It runs in its own virtualenv (--tensorsocket-python; --setup-tensorsocket DIR makes one:
      torch==2.13.0 first, then tensorsocket==0.0.5, this venv's versions of tensorcom's
      dependencies, and a .pth pointing at this checkout's src/).

Measured per setup and K, in one run:
  * CPU-s per 1k images per job: user + system CPU of every process of the setup (servers, jobs and
    all their descendants, start-up included), from wait4() of each process this script starts; it
    is a child subreaper, so descendants orphaned by their parents are reaped, and counted, here too;
    divided by (images each job received / 1000). K jobs of (a) pay K loaders; (b) and (c) pay one.
  * per-job img/s: each job's images after its first batch / time from its first to its last batch;
    the mean and the minimum over the K jobs.
  * peak memory: the largest total, over the setup's processes, of RSS (and of PSS, which shares
    shared pages out fairly), sampled from /proc every 0.25 s; MB.
A setup that crashes, hangs (--timeout per setup; every process tree is killed at the end), passes
--max-memory-gb (PSS sum; killed: the machine is shared) or delivers fewer images than an epoch has
is reported as such: that is its result. With --repeats R the setups run R interleaved times and
the run whose slowest job was fastest is kept (each fan-out setup runs R times, and the run whose
server used least CPU is kept).

Then the fan-out cost of zshare: one `tensorcom.serve(..., "zshare://...", workers=1,
min_consumers=K)` server of a preloaded synthetic batch (9.6 MB) feeding K = 1, 2, 4 consumers that do
nothing else; the server's extra CPU (its process tree) per extra consumer per GB delivered to it,
(CPU(K) - CPU(1)) / ((K - 1) * GB per consumer), as % of one core at 1 GB/s (target <= 5%), with
the consumers on the server's host taking the shared-memory handoff (the default there) and with
frames through the socket (the consumers say shm=False: what a consumer on another host gets). Beside
them the same figure for the floor of a ZeroMQ transport: one raw pyzmq PUB socket sending the same
buffer zero-copy to K SUB sockets (--fanout-transports tcp,ipc for both transports), and the ratios
zshare / raw PUB.

The processes of each setup are benchmarks/_sharing_roles.py's roles (the jobs, tensorsocket's
producer, the fan-out servers); benchmarks/_processes.py runs, reaps, samples and kills them.

    .venv/bin/python benchmarks/sharing.py --setup-tensorsocket /work/venvs/tensorsocket   # once
    .venv/bin/python benchmarks/sharing.py --tensorsocket-python /work/venvs/tensorsocket/bin/python
    .venv/bin/python benchmarks/sharing.py --quick ...      # 640 images, K in 1,2

The machine this runs on is small (2 cores) and usually shared: figures are noisy, ratios more
telling than absolute rates.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _processes import Reaper, Setup, run_setup  # benchmarks/_processes.py

from pipeline import BATCH, ROOT, SIZE, make_dataset  # benchmarks/pipeline.py

ROLES = str(Path(__file__).resolve().with_name("_sharing_roles.py"))  # the processes of the setups
TENSORCOM_DEPS = ("numpy", "pyzmq", "msgpack", "braceexpand", "pillow", "simplejpeg", "turbojpeg")


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that were free a moment ago."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


# ---------------------------------------------------------------- the setups


def job_command(python: str, role: str, args: argparse.Namespace, *extra: str) -> list[str]:
    """A command running `role` (of _sharing_roles.py) with the step options."""
    return [python, ROLES, role, "--step-ms", str(args.step_ms), *([] if args.touch else ["--no-touch"]), *extra]


def independent(k: int, root: Path, args: argparse.Namespace) -> Setup:
    """(a): K jobs, each with its own dir_pipeline(workers=W)."""
    jobs = [job_command(sys.executable, "job-pipeline", args, "--dir", str(root), "--workers", str(args.workers),
                        "--seed", str(i)) for i in range(k)]
    return Setup(f"(a) {k} independent pipelines", [], jobs, args.expected)


def zshare_missing() -> str | None:
    """Why serve-imagenet-dir cannot serve zshare here (None when its command line takes --min-consumers)."""
    command = [sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", "--help"]
    try:
        text = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60, cwd=ROOT).stdout
    except subprocess.TimeoutExpired:
        return "serve-imagenet-dir --help timed out"
    if "--min-consumers" in text:
        return None
    return "serve-imagenet-dir has no --min-consumers (zshare not implemented yet)"


def shared(k: int, root: Path, args: argparse.Namespace) -> Setup:
    """(b): one serve-imagenet-dir -w W to zshare, K jobs joining it."""
    port = free_ports(1)[0]
    server = [sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", "-d", str(root), "-b", str(BATCH),
              "--size", str(SIZE), "-w", str(args.workers), "--epochs", "1", "-r", "0", "--seed", "0",
              "--min-consumers", str(k), f"zshare://127.0.0.1:{port}"]
    jobs = [job_command(sys.executable, "job-zjoin", args, "--url", f"zjoin://127.0.0.1:{port}") for _ in range(k)]
    return Setup("(b) 1 serve-imagenet-dir -> zshare", [server], jobs, args.expected, args.zshare_missing)


def tensorsocket(k: int, root: Path, args: argparse.Namespace, producer_batch: int, tag: str = "(c)") -> Setup:
    """(c): one tensorsocket producer over dir_pipeline(workers=W), K TensorConsumer jobs."""
    python = args.tensorsocket_python
    ports = ",".join(map(str, free_ports(4)))
    name = f"{tag} tensorsocket 0.0.5, producer_batch_size={producer_batch}"
    if not python:
        return Setup(name, [], [], args.expected, "no --tensorsocket-python (make one with --setup-tensorsocket DIR)")
    server = [python, ROLES, "tensorsocket-producer", "--dir", str(root), "--workers", str(args.workers),
              "--ports", ports, "--consumers", str(k), "--producer-batch", str(producer_batch)]
    jobs = [job_command(python, "job-tensorsocket", args, "--ports", ports) for _ in range(k)]
    return Setup(name, [server], jobs, args.expected)


# ---------------------------------------------------------------- reports


def cpu_per_k(result: dict) -> float | None:
    """Total CPU-seconds per 1,000 images per job."""
    if not result.get("images"):
        return None
    return result["cpu"] / (result["images"] / 1000)


def fmt(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def row(k: int, r: dict) -> str:
    """One markdown table row of a setup's result."""
    if r.get("failure") and not r.get("images"):
        return f"| {k} | {r['name']} | {r['failure']} | | | | | | | |"
    note = "; ".join(([r["failure"]] if r.get("failure") else []) + r.get("notes", []))
    return (f"| {k} | {r['name']} | {r['images']:.0f} | {fmt(r['rate_mean'])} / {fmt(r['rate_min'])} | "
            f"{fmt(r['epoch_rate_min'])} | "
            f"{fmt(cpu_per_k(r), '.2f')} | {r['server_cpu']:.1f} / {r['cpu']:.1f} | {r['peak_rss_mb']:.0f} | "
            f"{r['peak_pss_mb']:.0f} | {note} |")


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def label(result: dict) -> str:
    """"(b)" of "(b) 1 serve-imagenet-dir -> zshare"."""
    return result["name"].split()[0]


def tables(results: dict[int, list[dict]]) -> str:
    """The results table and the ratios to (a) for each K."""
    head = ("| K | setup | images/job | per-job img/s after 1st batch (mean / min) | per-job img/s from start "
            "(min) | CPU-s per 1k img per job | server / all CPU-s | peak RSS sum MB | peak PSS sum MB | notes |")
    lines = [head, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for k, rows in results.items():
        lines += [row(k, r) for r in rows]
    others = [label(r) for r in next(iter(results.values()))[1:]]
    head = "".join(f" {x}/(a) CPU per 1k | {x}/(a) per-job img/s (min, after 1st batch) |" for x in others)
    lines += ["", "| K |" + head, "|---:|" + "---:|" * (2 * len(others))]
    for k, (a, *rest) in results.items():
        cells = []
        for other in rest:
            cells += [ratio(cpu_per_k(other), cpu_per_k(a)), ratio(other.get("rate_min"), a.get("rate_min"))]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def addresses(transport: str, count: int) -> list[str]:
    """`count` fresh addresses for `transport`: 127.0.0.1:PORT (tcp) or /tmp paths (ipc)."""
    if transport == "ipc":
        folder = tempfile.mkdtemp(prefix="tc-fan-", dir="/tmp")
        atexit.register(shutil.rmtree, folder, True)
        return [f"{folder}/s{i}" for i in range(count)]
    return [f"127.0.0.1:{port}" for port in free_ports(count)]


def fanout_setup(kind: str, k: int, batches: int, transport: str) -> Setup:
    """K bare consumers of one server of the preloaded batch: tensorcom's zshare, or raw ZeroMQ PUB."""
    bare = argparse.Namespace(step_ms=0, touch=False)
    suffix = "" if transport == "tcp" else f"+{transport}"
    if kind.startswith("zshare"):
        address, shm = addresses(transport, 1)[0], "on" if kind == "zshare-shm" else "off"
        server = [sys.executable, ROLES, "fanout-server", "--url", f"zshare{suffix}://{address}"]
        jobs = [job_command(sys.executable, "job-zjoin", bare, "--url", f"zjoin{suffix}://{address}", "--shm", shm)
                for _ in range(k)]
    else:
        url = ",".join(f"{transport}://{address}" for address in addresses(transport, 2))
        server = [sys.executable, ROLES, "fanout-raw-server", "--url", url]
        jobs = [job_command(sys.executable, "job-raw", bare, "--url", url) for _ in range(k)]
    server += ["--batches", str(batches), "--consumers", str(k)]
    return Setup(f"fan-out {kind} {transport} K={k}", [server], jobs, batches * BATCH)


FANOUT_KINDS = {"zshare-shm": "tensorcom.serve -> zshare (1 worker), shared-memory handoff",
                "zshare": "tensorcom.serve -> zshare (1 worker), frames through the socket",
                "raw": "raw pyzmq PUB, zero-copy"}


def fanout(ks: list[int], batches: int, args: argparse.Namespace, reaper: Reaper) -> str:
    """Server CPU per extra consumer per GB delivered to it, for zshare and for raw ZeroMQ PUB (the
    floor of a ZeroMQ transport); then zshare's figures over the floor's."""
    gb = batches * BATCH * SIZE * SIZE * 3 / 1e9
    transports = args.fanout_transports.split(",")
    figures: dict[tuple[str, str, int], tuple[float, float | None, float]] = {}
    head = ("| server | consumers | server CPU-s (of which system) | server CPU-s per GB delivered | consumer CPU-s "
            "per GB | extra server CPU per extra consumer, % of one core at 1 GB/s | notes |")
    lines = [f"fan-out: {batches} batches of {BATCH * SIZE * SIZE * 3 / 1e6:.1f} MB = {gb:.2f} GB per consumer",
             head, "|---|---:|---:|---:|---:|---:|---|"]
    for kind, transport in [(kind, t) for t in transports for kind in FANOUT_KINDS]:
        name = f"{FANOUT_KINDS[kind]}, {transport}"
        if kind.startswith("zshare") and args.zshare_missing:
            lines.append(f"| {name} | | not available: {args.zshare_missing} | | | | |")
            continue
        base = None
        for k in ks:
            r = cheapest([run_setup(fanout_setup(kind, k, batches, transport), reaper, args.timeout, args.max_memory_mb)
                          for _ in range(args.repeats)])
            if r.get("failure") and not r.get("images"):
                lines.append(f"| {name} | {k} | {r['failure']} | | | | |")
                continue
            delivered = k * r["images"] * SIZE * SIZE * 3 / 1e9
            base = r["server_cpu"] if k == 1 else base
            extra = (r["server_cpu"] - base) / ((k - 1) * gb) * 100 if base is not None and k > 1 else None
            notes = "; ".join(([r["failure"]] if r.get("failure") else []) + r["notes"])
            figures[kind, transport, k] = (r["server_cpu"] / delivered, extra, r["server_cpu"])
            lines.append(f"| {name} | {k} | {r['server_cpu']:.2f} ({r['server_sys']:.2f}) | "
                         f"{r['server_cpu'] / delivered:.3f} | {(r['cpu'] - r['server_cpu']) / delivered:.3f} | "
                         f"{fmt(extra, '.1f')} | {notes} |")
        slope = fitted_slope({k: figures[kind, transport, k][2] for k in ks if (kind, transport, k) in figures})
        if slope is not None:
            lines.append(f"| {name} | least-squares slope over K | | | | {slope / gb * 100:.1f} | |")
    return "\n".join(lines + [""] + fanout_ratios(figures, ks, transports))


def fitted_slope(cpu_by_k: dict[int, float]) -> float | None:
    """The least-squares slope of server CPU-s against K (CPU-s per extra consumer), over every K
    measured: less sensitive to one noisy run than the difference to K = 1; None with < 2 points."""
    if len(cpu_by_k) < 2:
        return None
    ks, cpus = np.array(list(cpu_by_k), float), np.array(list(cpu_by_k.values()))
    return float(np.polyfit(ks, cpus, 1)[0])


def cheapest(runs: list[dict]) -> dict:
    """Of repeated fan-out runs, the complete one whose server used least CPU (interference from other
    work only adds CPU), else the first."""
    complete = [r for r in runs if not r.get("failure")]
    return min(complete, key=lambda r: r["server_cpu"]) if complete else runs[0]


def fanout_ratios(figures: dict, ks: list[int], transports: list[str]) -> list[str]:
    """Each zshare kind's (server CPU-s per GB delivered, extra CPU per extra consumer) over raw PUB's,
    per transport and K (rows where either did not run are left out)."""
    lines = ["| zshare | transport | consumers | zshare/raw server CPU-s per GB delivered | "
             "zshare/raw extra CPU per extra consumer |", "|---|---|---:|---:|---:|"]
    for kind in ("zshare-shm", "zshare"):
        for transport in transports:
            for k in ks:
                ours, floor = figures.get((kind, transport, k)), figures.get(("raw", transport, k))
                if ours and floor:
                    cells = f"{ratio(ours[0], floor[0])} | {ratio(ours[1], floor[1])}"
                    lines.append(f"| {kind} | {transport} | {k} | {cells} |")
    return lines


# ---------------------------------------------------------------- set-up of tensorsocket's venv


def setup_tensorsocket(target: Path) -> int:
    """Make a venv at `target` with torch==2.13.0 (first: an unpinned torch pulls CUDA packages),
    tensorsocket==0.0.5, this venv's versions of tensorcom's dependencies, and a .pth for src/."""
    from importlib.metadata import PackageNotFoundError, version

    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    pip = [str(target / "bin" / "python"), "-m", "pip", "install"]
    subprocess.run(pip + ["torch==2.13.0"], check=True)
    subprocess.run(pip + ["tensorsocket==0.0.5"], check=True)
    pins = []
    for name in TENSORCOM_DEPS:
        try:
            pins.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            pass
    subprocess.run(pip + pins, check=True)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(target / "bin" / "python"), "-c", purelib],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "tensorcom-src.pth").write_text(str(ROOT / "src") + "\n")
    print(f"tensorsocket venv ready: --tensorsocket-python {target / 'bin' / 'python'}")
    return 0


# ---------------------------------------------------------------- the run


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="640 images, K in 1,2, a short fan-out")
    parser.add_argument("--ks", default=None, help="comma-separated K values (default 1,2,4; quick 1,2)")
    parser.add_argument("--images", type=int, default=None, help="JPEGs in the folder (default 3000, quick 640)")
    parser.add_argument("--workers", type=int, default=2, help="W: decoding processes of each pipeline (default 2)")
    parser.add_argument("--step-ms", type=float, default=10.0, help="each job's sleep per batch, ms (default 10)")
    parser.add_argument("--no-touch", dest="touch", action="store_false", help="jobs do not read the batch's bytes")
    parser.add_argument("--setups", default="a,b,c", help="which of a,b,c to run (default all)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="interleaved runs of each setup; the run with the best slowest job is kept (default 1)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per setup (default 300, quick 120)")
    parser.add_argument("--fanout-batches", type=int, default=None,
                        help="batches per fan-out run (default 400, quick 100; 0: skip)")
    parser.add_argument("--fanout-transports", default="tcp",
                        help="transports of the fan-out runs, comma-separated: tcp, ipc (default tcp)")
    parser.add_argument("--tensorsocket-python", default=None, help="python of a venv with tensorsocket 0.0.5")
    parser.add_argument("--producer-batch", default="8",
                        help="tensorsocket's producer_batch_size, comma-separated for one (c) row each (default 8, "
                        "its own default; 1 crashes in 0.0.5; 2 pickles 2 batches per 64-image message, 8 eight)")
    parser.add_argument("--max-memory-gb", type=float, default=8.0,
                        help="kill a setup whose processes' PSS sum passes this (default 8; the machine is shared)")
    parser.add_argument("--setup-tensorsocket", metavar="DIR", help="make the tensorsocket venv at DIR and exit")
    args = parser.parse_args(argv)
    args.max_memory_mb = args.max_memory_gb * 1024
    return args


def setups(k: int, root: Path, args: argparse.Namespace) -> list[tuple[str, Setup]]:
    """(letter, Setup) of (a), (b) and one (c) per --producer-batch value, for K = k."""
    batches = [int(b) for b in args.producer_batch.split(",")]
    labels = ["(c)"] + [f"(c{i + 1})" for i in range(1, len(batches))]
    return [("a", independent(k, root, args)), ("b", shared(k, root, args))] + \
        [("c", tensorsocket(k, root, args, b, name)) for b, name in zip(batches, labels)]


def better(new: dict, old: dict | None) -> dict:
    """Of two runs of one setup, the one whose slowest job was faster (one with figures over none)."""
    if old is None or (new.get("rate_min") or 0) > (old.get("rate_min") or 0):
        return new
    return old


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.setup_tensorsocket:
        return setup_tensorsocket(Path(args.setup_tensorsocket))
    ks = [int(k) for k in (args.ks or ("1,2" if args.quick else "1,2,4")).split(",")]
    count = args.images or (640 if args.quick else 3000)
    args.timeout = args.timeout or (120 if args.quick else 300)
    fanout_batches = (100 if args.quick else 400) if args.fanout_batches is None else args.fanout_batches
    root = make_dataset(count) / "train"
    args.expected = count
    args.zshare_missing = zshare_missing()
    print(f"{count} JPEGs in {root}; K = {ks}; W = {args.workers}; step: {'read every byte, ' if args.touch else ''}"
          f"sleep {args.step_ms:g} ms per batch of {BATCH}; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}. The machine may be shared with other work: figures are noisy.", flush=True)
    reaper = Reaper()
    chosen = args.setups.split(",")
    results: dict[int, list[dict]] = {}
    for k in ks:
        best: list[dict | None] = []
        for _ in range(args.repeats):
            for i, (letter, setup) in enumerate(setups(k, root, args)):
                result = run_setup(setup, reaper, args.timeout, args.max_memory_mb) if letter in chosen else \
                    {"name": setup.name, "failure": "not run"}
                figures = json.dumps({key: result.get(key) for key in sorted(result)})
                print(f"  K={k} {setup.name}: {figures}", flush=True)
                best += [None] * (i + 1 - len(best))
                best[i] = better(result, best[i])
        results[k] = best
    print()
    print(tables(results))
    if fanout_batches:
        print()
        print(fanout(ks, fanout_batches, args, reaper))
    return 0


if __name__ == "__main__":
    sys.exit(main())
