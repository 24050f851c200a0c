"""Processes of a benchmark and what they cost: one reader of the /proc process table, the CPU of
this process's tree (scaling.py), and a setup of server and job commands (sharing.py) run in
sessions of their own, reaped with wait4 (this process is a child subreaper, so orphaned
descendants are reaped and counted here too), sampled for memory, and killed at the end.

A job reports on stdout with one line `RESULT {json}` ("images", "rate" after its first batch,
"last": time.monotonic() of its last batch); `summarize` turns those and the reaped CPU into a
setup's figures. A helper module of the benchmarks, not a benchmark.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from pipeline import ROOT, cpu_seconds  # benchmarks/pipeline.py

PR_SET_CHILD_SUBREAPER = 36
TICK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- the process table


class Row(NamedTuple):
    """One process: its pid, parent, session, and CPU seconds of it and its reaped children."""

    pid: int
    ppid: int
    sid: int
    cpu: float


def proc_table() -> list[Row]:
    """Every process on the machine, from /proc/PID/stat (those that end while it is read are left out)."""
    rows = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            cpu = sum(int(value) for value in fields[11:15]) / TICK  # utime stime cutime cstime
            rows.append(Row(int(entry), int(fields[1]), int(fields[3]), cpu))
    return rows


def descendants(root: int, rows: list[Row]) -> list[Row]:
    """The rows of every live descendant of `root`."""
    children: dict[int, list[Row]] = {}
    for row in rows:
        children.setdefault(row.ppid, []).append(row)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def tree_cpu() -> float:
    """CPU seconds of this process, its reaped children, and every live descendant (with the children
    each of them reaped)."""
    return cpu_seconds() + sum(row.cpu for row in descendants(os.getpid(), proc_table()))


def wait_gone(pids: list[int], timeout: float = 30.0) -> None:
    """Wait until none of `pids` is alive (killed actors: their CPU must not leave a later run's count)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in pids):
        time.sleep(0.1)


# ---------------------------------------------------------------- processes started here


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
            pids = [row.pid for row in proc_table() if row.sid in self.sessions]
            sizes = [memory_kb(pid) for pid in pids]
            self.peak_rss = max(self.peak_rss, sum(rss for rss, _ in sizes))
            self.peak_pss = max(self.peak_pss, sum(pss for _, pss in sizes))
            if self.peak_pss > self.cap_kb:
                self.over = True
                kill_sessions(self.sessions)


def kill_sessions(sessions: set[int]) -> None:
    """SIGKILL every process in `sessions` (the process trees this script started)."""
    for pid in [row.pid for row in proc_table() if row.sid in sessions]:
        if pid != os.getpid():
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
    the measured figures (summarize's, and the wall time and peak memory; sharing.py's docstring)."""
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
    result.update(wall=time.monotonic() - start, peak_rss_mb=sampler.peak_rss / 1024,
                  peak_pss_mb=sampler.peak_pss / 1024)
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
        alive = [row.pid for row in proc_table() if row.sid in sessions]
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

