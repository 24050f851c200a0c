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
the run whose slowest job was fastest is kept.

Then the fan-out cost of zshare: one `tensorcom.serve(..., "zshare://...", workers=1,
min_consumers=K)` server of a preloaded synthetic batch (9.6 MB) feeding K = 1, 2, 4 consumers that do
nothing else; the server's extra CPU (its process tree) per extra consumer per GB delivered to it,
(CPU(K) - CPU(1)) / ((K - 1) * GB per consumer), as % of one core at 1 GB/s (target <= 5%). Beside
it the same figure for the floor of a ZeroMQ transport: one raw pyzmq PUB socket sending the same
buffer zero-copy to K SUB sockets (--fanout-transports tcp,ipc for both transports).

    .venv/bin/python benchmarks/sharing.py --setup-tensorsocket /work/venvs/tensorsocket   # once
    .venv/bin/python benchmarks/sharing.py --tensorsocket-python /work/venvs/tensorsocket/bin/python
    .venv/bin/python benchmarks/sharing.py --quick ...      # 640 images, K in 1,2

The machine this runs on is small (2 cores) and usually shared: figures are noisy, ratios more
telling than absolute rates.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import importlib.util
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCH = 64
SIZE = 224
PR_SET_CHILD_SUBREAPER = 36
TENSORCOM_DEPS = ("numpy", "pyzmq", "msgpack", "braceexpand", "pillow", "simplejpeg", "turbojpeg")


# ---------------------------------------------------------------- the training-loop stand-in


@dataclass
class Step:
    """What a job does with each batch: read every byte (`touch`), then sleep `ms` milliseconds."""

    ms: float = 10.0
    touch: bool = True


class Tally:
    """A job's count of batches and images, timed from its first batch (start-up left out)."""

    def __init__(self):
        self.batches = self.images = self.first_images = 0
        self.first: float | None = None
        self.last = 0.0
        self.checksum = 0

    def take(self, images, step: Step) -> None:
        """Count one batch of `images` (array-like, (N, 224, 224, 3) uint8) and do the step's work."""
        import numpy as np

        array = np.asarray(images)
        if array.ndim != 4 or array.shape[1:] != (SIZE, SIZE, 3) or array.dtype != np.uint8:
            raise RuntimeError(f"unexpected images {array.dtype} {array.shape}")
        if step.touch:
            flat = np.ascontiguousarray(array).reshape(-1)
            self.checksum ^= int(flat.view(np.uint64).sum() if flat.size % 8 == 0 else flat.max())
        if step.ms > 0:
            time.sleep(step.ms / 1000)
        now = time.monotonic()
        if self.first is None:
            self.first, self.first_images = now, len(array)
        self.batches, self.images, self.last = self.batches + 1, self.images + len(array), now

    def report(self, **extra) -> None:
        """Print the job's one RESULT line (JSON) on stdout."""
        span = self.last - (self.first or self.last)
        rate = (self.images - self.first_images) / span if span > 0 else None
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print("RESULT " + json.dumps({"batches": self.batches, "images": self.images, "rate": rate,
                                      "first": self.first, "last": self.last, "own_cpu": usage.ru_utime + usage.ru_stime,
                                      **extra}), flush=True)


def job_pipeline(args: argparse.Namespace) -> None:
    """(a): iterate this job's own dir_pipeline(workers=W) for one epoch."""
    from tensorcom.images.imagenet import dir_pipeline

    tally = Tally()
    pipeline = dir_pipeline(args.dir, batch_size=BATCH, size=SIZE, workers=args.workers, seed=args.seed)
    for images, _labels in pipeline:
        tally.take(images, args.step)
    pipeline.close()
    tally.report()


def job_zjoin(args: argparse.Namespace) -> None:
    """(b) and the fan-out consumers: one epoch from Connection("zjoin://...")."""
    from tensorcom import Connection

    tally = Tally()
    conn = Connection(args.url)
    for batch in conn:
        tally.take(batch[0], args.step)
    conn.close()
    tally.report()


def job_tensorsocket(args: argparse.Namespace) -> None:
    """(c): one epoch from a tensorsocket TensorConsumer (run with the tensorsocket venv's python)."""
    from tensorsocket import TensorConsumer

    ports = [int(p) for p in args.ports.split(",")]
    consumer = TensorConsumer(port=ports[0], ack_port=ports[1], heart_ports=(ports[2], ports[3]), batch_size=BATCH)
    tally = Tally()
    for images, _labels in consumer:
        tally.take(images.numpy(), args.step)
    tally.report()


# ---------------------------------------------------------------- servers run as roles of this script


class TorchBatches:
    """A tensorsocket loader: a Pipeline of [images, labels] numpy batches as (tensor, tensor), with len."""

    def __init__(self, pipeline):
        self.pipeline = pipeline

    def __len__(self) -> int:
        return len(self.pipeline)

    def __iter__(self):
        import torch

        for images, labels in self.pipeline:
            yield torch.from_numpy(images), torch.from_numpy(labels)


def tensorsocket_producer(args: argparse.Namespace) -> None:
    """(c)'s server: TensorProducer over TorchBatches(dir_pipeline(workers=W)); waits until
    args.consumers have registered (heartbeats), serves one epoch, then joins."""
    from tensorsocket import TensorProducer

    from tensorcom.images.imagenet import dir_pipeline

    ports = [int(p) for p in args.ports.split(",")]
    pipeline = dir_pipeline(args.dir, batch_size=BATCH, size=SIZE, workers=args.workers, seed=args.seed, dedicated=True)
    producer = TensorProducer(TorchBatches(pipeline), port=ports[0], ack_port=ports[1], heart_ports=(ports[2], ports[3]),
                              producer_batch_size=int(args.producer_batch))
    while len(producer.hb.consumers) < args.consumers:
        time.sleep(0.1)
    for _ in producer:
        pass
    print("RESULT " + json.dumps({"epochs": producer.epoch}), flush=True)
    producer.join()
    pipeline.close()


class RepeatBatch:
    """A picklable source: one synthetic [images uint8 (64,224,224,3), labels int32 (64,)] batch,
    made where it is iterated, yielded `count` times."""

    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        import numpy as np

        rng = np.random.default_rng(0)
        batch = [rng.integers(0, 256, (BATCH, SIZE, SIZE, 3), dtype=np.uint8), np.arange(BATCH, dtype=np.int32)]
        for _ in range(self.count):
            yield batch


def fanout_server(args: argparse.Namespace) -> None:
    """The fan-out server: tensorcom.serve of RepeatBatch(args.batches) to zshare, one epoch, one worker."""
    import tensorcom
    from tensorcom.pipeline import Pipeline

    tensorcom.serve(Pipeline(RepeatBatch(args.batches)), args.url, workers=1, epochs=1, report=None,
                    min_consumers=args.consumers)


def raw_server(args: argparse.Namespace) -> None:
    """The fan-out floor: one ZeroMQ PUB socket (no high-water mark) sends RepeatBatch's batch
    zero-copy `args.batches` times, then b"end", to `args.consumers` subscribers, which announce
    themselves on a PULL socket first (--url: the data and the hello addresses, comma-separated)."""
    import zmq

    data, hello = args.url.split(",")
    context = zmq.Context()
    pub, pull = context.socket(zmq.PUB), context.socket(zmq.PULL)
    pub.sndhwm = 0
    pub.bind(data)
    pull.bind(hello)
    for _ in range(args.consumers):
        pull.recv()
    time.sleep(0.5)  # let the last subscription reach the PUB socket
    for images, labels in RepeatBatch(args.batches):
        pub.send_multipart([labels, images], copy=False)
    pub.send(b"end")
    pub.close(linger=60_000)
    pull.close(linger=0)
    context.term()


def job_raw(args: argparse.Namespace) -> None:
    """A raw_server subscriber: says hello, then counts batches until b"end"."""
    import numpy as np
    import zmq

    data, hello = args.url.split(",")
    context = zmq.Context()
    sub, push = context.socket(zmq.SUB), context.socket(zmq.PUSH)
    sub.connect(data)
    sub.subscribe(b"")
    time.sleep(0.2)
    push.connect(hello)
    push.send(b"hello")
    tally = Tally()
    while len(message := sub.recv_multipart(copy=False)) > 1:
        tally.take(np.frombuffer(message[1].buffer, np.uint8).reshape(-1, SIZE, SIZE, 3), args.step)
    tally.report()
    sub.close(linger=0)
    push.close(linger=0)
    context.term()


ROLES = {"job-pipeline": job_pipeline, "job-zjoin": job_zjoin, "job-tensorsocket": job_tensorsocket,
         "tensorsocket-producer": tensorsocket_producer, "fanout-server": fanout_server,
         "fanout-raw-server": raw_server, "job-raw": job_raw}


# ---------------------------------------------------------------- processes and their accounting


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


@dataclass
class Proc:
    """One process this script started (in a session of its own), its log files and, once reaped,
    its exit status and the CPU seconds of it and its reaped descendants."""

    name: str
    popen: subprocess.Popen
    log: Path
    status: int | None = None
    cpu: float = 0.0
    system: float = 0.0

    @classmethod
    def start(cls, name: str, command: list[str], logdir: Path) -> Proc:
        log = logdir / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=ROOT)
        return cls(name, popen, log)

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def result(self) -> dict | None:
        """The JSON of the process's last RESULT line, or None."""
        found = [line[7:] for line in self.lines() if line.startswith("RESULT ")]
        return json.loads(found[-1]) if found else None

    def error(self) -> str:
        """The last line of its output that looks like an error (else its last line)."""
        lines = [line.strip() for line in self.lines() if line.strip()]
        errors = [line for line in lines if "rror" in line or "Exception" in line or "Killed" in line]
        return (errors or lines or [f"exit status {self.status}"])[-1][:200]


class Reaper:
    """Reaps every child of this process (wait4), crediting the CPU to the Proc it belongs to, or to
    `orphans` for descendants re-parented here (this process is a child subreaper)."""

    def __init__(self):
        self.procs: dict[int, Proc] = {}
        self.orphans = 0.0
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def track(self, proc: Proc) -> Proc:
        self.procs[proc.popen.pid] = proc
        return proc

    def reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            cpu = usage.ru_utime + usage.ru_stime
            proc = self.procs.pop(pid, None)
            if proc is None:
                self.orphans += cpu
                continue
            proc.status, proc.cpu, proc.system = os.waitstatus_to_exitcode(status), cpu, usage.ru_stime
            proc.popen.returncode = proc.status


def proc_table() -> list[tuple[int, int]]:
    """(pid, session id) of every process on the machine (from /proc/PID/stat)."""
    rows = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            rows.append((int(entry), int(stat[stat.rindex(")") + 2:].split()[3])))
    return rows


def memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process in kB; (0, 0) when it is gone."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return 0, 0
    fields = {line.split(":")[0]: int(line.split()[1]) for line in rollup[1:] if line.endswith("kB")}
    return fields.get("Rss", 0), fields.get("Pss", 0)


class Sampler(threading.Thread):
    """Every `interval` seconds, the summed RSS and PSS of every process in `sessions`; keeps peaks.
    When the PSS sum passes `cap_mb`, kills the sessions (the machine is shared) and sets `over`."""

    def __init__(self, sessions: set[int], cap_mb: float, interval: float = 0.25):
        super().__init__(daemon=True)
        self.sessions, self.cap_kb, self.interval = sessions, cap_mb * 1024, interval
        self.peak_rss = self.peak_pss = 0
        self.over = False
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            pids = [pid for pid, sid in proc_table() if sid in self.sessions]
            sizes = [memory_kb(pid) for pid in pids]
            self.peak_rss = max(self.peak_rss, sum(rss for rss, _ in sizes))
            self.peak_pss = max(self.peak_pss, sum(pss for _, pss in sizes))
            if self.peak_pss > self.cap_kb:
                self.over = True
                kill_sessions(self.sessions)


def kill_sessions(sessions: set[int]) -> None:
    """SIGKILL every process in `sessions` (the process trees this script started)."""
    for pid, sid in proc_table():
        if sid in sessions and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# ---------------------------------------------------------------- running one setup


@dataclass
class Setup:
    """Commands of one setup: servers start first, then the K jobs; `expected` images per job."""

    name: str
    servers: list[list[str]]
    jobs: list[list[str]]
    expected: int
    unavailable: str | None = None  # why the setup cannot run here (then it is not started)
    notes: list[str] = field(default_factory=list)


def run_setup(setup: Setup, reaper: Reaper, timeout: float, cap_mb: float, grace: float = 20.0) -> dict:
    """Run `setup` under `timeout` seconds and `cap_mb` MB of memory (PSS sum); kill whatever is left;
    the measured figures (see module doc)."""
    if setup.unavailable:
        return {"name": setup.name, "failure": f"not available: {setup.unavailable}"}
    logdir = Path(tempfile.mkdtemp(prefix="sharing-"))
    sessions: set[int] = set()
    sampler = Sampler(sessions, cap_mb)
    reaper.reap()
    orphans0, start = reaper.orphans, time.monotonic()
    servers = [reaper.track(Proc.start(f"server{i}", c, logdir)) for i, c in enumerate(setup.servers)]
    sessions.update(p.popen.pid for p in servers)
    time.sleep(0.5)
    jobs = [reaper.track(Proc.start(f"job{i}", c, logdir)) for i, c in enumerate(setup.jobs)]
    sessions.update(p.popen.pid for p in jobs)
    sampler.start()
    failure = watch(servers, jobs, reaper, start + timeout, grace, sampler)
    sampler.stop.set()
    kill_sessions(sessions)
    settle(reaper, sessions, servers + jobs)
    if sampler.over:
        failure = f"failed: over the memory cap of {cap_mb / 1024:.0f} GB (PSS sum; killed)"
    result = summarize(setup, servers, jobs, failure, start)
    result.update(wall=time.monotonic() - start, peak_rss_mb=sampler.peak_rss / 1024, peak_pss_mb=sampler.peak_pss / 1024)
    result["cpu"] += reaper.orphans - orphans0
    if result.get("failure") or result.get("notes"):
        result["logs"] = str(logdir)  # kept for a look at what went wrong
    else:
        shutil.rmtree(logdir, ignore_errors=True)
    return result


def watch(servers: list[Proc], jobs: list[Proc], reaper: Reaper, deadline: float, grace: float,
          sampler: Sampler) -> str | None:
    """Wait for every job to end (then up to `grace` s for the servers); a failure message or None."""
    jobs_done_at = None
    while True:
        reaper.reap()
        if sampler.over:
            return "failed: memory cap"
        failed = [p for p in servers + jobs if p.status not in (None, 0)]
        if failed:
            return f"failed: {failed[0].name} exited {failed[0].status}: {failed[0].error()}"
        if all(p.status is not None for p in jobs):
            jobs_done_at = jobs_done_at or time.monotonic()
            if all(p.status is not None for p in servers):
                return None
            if time.monotonic() - jobs_done_at > grace:
                return f"server still running {grace:.0f} s after the jobs ended (killed)"
        if time.monotonic() > deadline:
            done = sum(p.status is not None for p in jobs)
            hung = [p.name for p in servers + jobs if p.status is None]
            return f"failed: timeout, {done}/{len(jobs)} jobs finished; killed {' '.join(hung)}"
        time.sleep(0.05)


def settle(reaper: Reaper, sessions: set[int], procs: list[Proc], wait: float = 5.0) -> None:
    """Reap the setup's processes and their orphans until none of `sessions` is left (SIGKILL again
    after `wait` seconds)."""
    deadline = time.monotonic() + wait
    while True:
        reaper.reap()
        alive = [pid for pid, sid in proc_table() if sid in sessions]
        if not alive and all(p.status is not None for p in procs):
            return
        if time.monotonic() > deadline:
            kill_sessions(sessions)
            deadline = time.monotonic() + wait
        time.sleep(0.05)


def summarize(setup: Setup, servers: list[Proc], jobs: list[Proc], failure: str | None, start: float) -> dict:
    """The setup's figures from its processes' RESULT lines and reaped CPU (`start`: the monotonic
    time the setup's first process started)."""
    results = [p.result() for p in jobs]
    got = [r for r in results if r]
    images = [r["images"] for r in got]
    rates = [r["rate"] for r in got if r["rate"]]
    epoch_rates = [r["images"] / (r["last"] - start) for r in got if r["last"] and r["last"] > start]
    cpu = sum(p.cpu for p in servers + jobs)
    notes = list(setup.notes)
    if failure and not failure.startswith("failed"):
        notes.append(failure)
        failure = None
    if got and len(got) < len(jobs):
        failure = failure or f"failed: {len(jobs) - len(got)} of {len(jobs)} jobs reported nothing"
    short = [n for n in images if n < setup.expected]
    if short:
        notes.append(f"short epoch: jobs got {min(images)}-{max(images)} of {setup.expected} images")
    mean_images = sum(images) / len(images) if images else 0
    return {"name": setup.name, "failure": failure, "jobs": len(jobs), "images": mean_images,
            "rate_mean": sum(rates) / len(rates) if rates else None, "rate_min": min(rates) if rates else None,
            "epoch_rate_min": min(epoch_rates) if epoch_rates else None,
            "cpu": cpu, "server_cpu": sum(p.cpu for p in servers), "server_sys": sum(p.system for p in servers),
            "notes": notes}


def cpu_per_k(result: dict) -> float | None:
    """Total CPU-seconds per 1,000 images per job."""
    if not result.get("images"):
        return None
    return result["cpu"] / (result["images"] / 1000)


# ---------------------------------------------------------------- the setups


def job_command(python: str, role: str, args: argparse.Namespace, *extra: str) -> list[str]:
    """A command running `role` of this script with the step options."""
    return [python, str(Path(__file__).resolve()), "--role", role, "--step-ms", str(args.step_ms),
            *([] if args.touch else ["--no-touch"]), *extra]


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
    return None if "--min-consumers" in text else "serve-imagenet-dir has no --min-consumers (zshare not implemented yet)"


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
    server = [python, str(Path(__file__).resolve()), "--role", "tensorsocket-producer", "--dir", str(root),
              "--workers", str(args.workers), "--ports", ports, "--consumers", str(k),
              "--producer-batch", str(producer_batch)]
    jobs = [job_command(python, "job-tensorsocket", args, "--ports", ports) for _ in range(k)]
    return Setup(name, [server], jobs, args.expected)


# ---------------------------------------------------------------- reports


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
    script = str(Path(__file__).resolve())
    suffix = "" if transport == "tcp" else f"+{transport}"
    if kind == "zshare":
        address = addresses(transport, 1)[0]
        server = [sys.executable, script, "--role", "fanout-server", "--url", f"zshare{suffix}://{address}"]
        jobs = [job_command(sys.executable, "job-zjoin", bare, "--url", f"zjoin{suffix}://{address}") for _ in range(k)]
    else:
        url = ",".join(f"{transport}://{address}" for address in addresses(transport, 2))
        server = [sys.executable, script, "--role", "fanout-raw-server", "--url", url]
        jobs = [job_command(sys.executable, "job-raw", bare, "--url", url) for _ in range(k)]
    server += ["--batches", str(batches), "--consumers", str(k)]
    return Setup(f"fan-out {kind} {transport} K={k}", [server], jobs, batches * BATCH)


FANOUT_KINDS = {"zshare": "tensorcom.serve -> zshare (1 worker)", "raw": "raw pyzmq PUB, zero-copy"}


def fanout(ks: list[int], batches: int, args: argparse.Namespace, reaper: Reaper) -> str:
    """Server CPU per extra consumer per GB delivered to it, for zshare and for raw ZeroMQ PUB."""
    gb = batches * BATCH * SIZE * SIZE * 3 / 1e9
    head = ("| server | consumers | server CPU-s (of which system) | server CPU-s per GB delivered | consumer CPU-s "
            "per GB | extra server CPU per extra consumer, % of one core at 1 GB/s | notes |")
    lines = [f"fan-out: {batches} batches of {BATCH * SIZE * SIZE * 3 / 1e6:.1f} MB = {gb:.2f} GB per consumer",
             head, "|---|---:|---:|---:|---:|---:|---|"]
    for kind, transport in [(kind, t) for t in args.fanout_transports.split(",") for kind in FANOUT_KINDS]:
        name = f"{FANOUT_KINDS[kind]}, {transport}"
        if kind == "zshare" and args.zshare_missing:
            lines.append(f"| {name} | | not available: {args.zshare_missing} | | | | |")
            continue
        base = None
        for k in ks:
            r = run_setup(fanout_setup(kind, k, batches, transport), reaper, args.timeout, args.max_memory_mb)
            if r.get("failure") and not r.get("images"):
                lines.append(f"| {name} | {k} | {r['failure']} | | | | |")
                continue
            delivered = k * r["images"] * SIZE * SIZE * 3 / 1e9
            base = r["server_cpu"] if k == 1 else base
            extra = (r["server_cpu"] - base) / ((k - 1) * gb) * 100 if base is not None and k > 1 else None
            notes = "; ".join(([r["failure"]] if r.get("failure") else []) + r["notes"])
            lines.append(f"| {name} | {k} | {r['server_cpu']:.2f} ({r['server_sys']:.2f}) | "
                         f"{r['server_cpu'] / delivered:.3f} | {(r['cpu'] - r['server_cpu']) / delivered:.3f} | "
                         f"{fmt(extra, '.1f')} | {notes} |")
    return "\n".join(lines)


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
    site = subprocess.run([str(target / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
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
    parser.add_argument("--fanout-batches", type=int, default=None, help="batches per fan-out run (default 400, quick 100; 0: skip)")
    parser.add_argument("--fanout-transports", default="tcp",
                        help="transports of the fan-out runs, comma-separated: tcp, ipc (default tcp)")
    parser.add_argument("--tensorsocket-python", default=None, help="python of a venv with tensorsocket 0.0.5")
    parser.add_argument("--producer-batch", default="8",
                        help="tensorsocket's producer_batch_size, comma-separated for one (c) row each (default 8, "
                        "its own default; 1 crashes in 0.0.5; 2 pickles 2 batches per 64-image message, 8 eight)")
    parser.add_argument("--max-memory-gb", type=float, default=8.0,
                        help="kill a setup whose processes' PSS sum passes this (default 8; the machine is shared)")
    parser.add_argument("--setup-tensorsocket", metavar="DIR", help="make the tensorsocket venv at DIR and exit")
    for hidden in ("--role", "--dir", "--url", "--ports", "--seed"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--consumers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.step = Step(args.step_ms, args.touch)
    args.max_memory_mb = args.max_memory_gb * 1024
    args.seed = int(args.seed or 0)
    return args


def load_pipeline_benchmark():
    """benchmarks/pipeline.py as a module (its make_dataset writes and reuses the JPEG folder)."""
    spec = importlib.util.spec_from_file_location("pipeline_benchmark", Path(__file__).with_name("pipeline.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    if args.role:
        ROLES[args.role](args)
        return 0
    if args.setup_tensorsocket:
        return setup_tensorsocket(Path(args.setup_tensorsocket))
    ks = [int(k) for k in (args.ks or ("1,2" if args.quick else "1,2,4")).split(",")]
    count = args.images or (640 if args.quick else 3000)
    args.timeout = args.timeout or (120 if args.quick else 300)
    fanout_batches = (100 if args.quick else 400) if args.fanout_batches is None else args.fanout_batches
    root = load_pipeline_benchmark().make_dataset(count) / "train"
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
                print(f"  K={k} {setup.name}: {json.dumps({key: result.get(key) for key in sorted(result)})}", flush=True)
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
