"""wl-xargs's per-sample work: write the fields into a temp dir, run the command there, collect files.

`run_sample(sample, job)` is a module-level function so that spawned workers can run it.

In a worker process (tensorcom.pipeline.workers, via wlcommon.run_tasks) a command must not outlive the
tool: the first command a worker runs sets up `watch_for_stop`: SIGTERM (the pool's last word before
SIGKILL) only sets a flag that the waiting loop polls, and a thread blocked on the parent process
kills every running command's process group, removes the temporary directories and ends the worker
the moment the parent is gone (before the pool's own parent watchdog ends the worker with os._exit,
which would leave the commands behind; nobody is left to read the worker's answer anyway).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from tensorcom.cli import wlcommon
from tensorcom.errors import SampleError, WorkerError

_POLL_S = 0.2
_running: set[int] = set()  # process groups of the commands running in this process
_workdirs: set[str] = set()  # their temporary directories
_starting = threading.Lock()  # held while a command starts, and by the parent watch when it ends us
_stop_requested = False  # set by SIGTERM, in worker processes only
_watching = False


def should_stop() -> bool:
    """True in a worker process told to stop (SIGTERM)."""
    return _stop_requested


def watch_for_stop() -> None:
    """Once, in a process started by multiprocessing (a pool worker): SIGTERM sets the stop flag, and a
    daemon thread waits for the parent process to end (_stop_when_gone). Does nothing elsewhere."""
    global _watching
    parent = multiprocessing.parent_process()
    if _watching or parent is None or threading.current_thread() is not threading.main_thread():
        return
    _watching = True
    signal.signal(signal.SIGTERM, _request_stop)
    threading.Thread(target=_stop_when_gone, args=(parent,), daemon=True, name="wl-xargs-parent-watch").start()


def _request_stop(*_: object) -> None:
    """SIGTERM handler: only set the flag, so that no exception cuts a command's cleanup short."""
    global _stop_requested
    _stop_requested = True


def _stop_when_gone(parent) -> None:
    """Thread body: block until `parent` (a multiprocessing.parent_process()) ends, then kill the
    running commands, remove their directories and end this process."""
    parent.join()
    _starting.acquire()  # never released: no command may start after this
    for group in list(_running):
        _kill_group(group)
    for workdir in list(_workdirs):
        shutil.rmtree(workdir, ignore_errors=True)
    os._exit(1)


@dataclass(frozen=True)
class Job:
    """What to do with each sample: the command, input file base, fields, limits and filters."""

    command: str
    base: str = "sample"
    fields: tuple[str, ...] = ()
    timeout: float | None = None
    include: str | None = None
    exclude: str | None = None
    skip_errors: bool = False


def run_sample(sample: dict, job: Job) -> dict | tuple:
    """The output sample for one input sample, or ("failed", key, why) when the command failed and
    job.skip_errors is set; a failed command otherwise raises WorkerError naming the key."""
    key = str(sample.get("__key__", ""))
    watch_for_stop()
    workdir = tempfile.mkdtemp(prefix="wl-xargs-")
    _workdirs.add(workdir)
    try:
        write_inputs(workdir, wlcommon.select_fields(sample, list(job.fields) or None), job.base)
        why = run_command(job.command, workdir, key, job.timeout)
        if why is not None:
            if job.skip_errors:
                return ("failed", key, why)
            raise WorkerError(f"command {why}: {job.command!r}", key=key)
        return collect(workdir, key, job)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        _workdirs.discard(workdir)


def write_inputs(workdir: str, sample: dict, base: str) -> None:
    """Write each non-metadata field EXT of `sample` as workdir/BASE.EXT."""
    for ext, value in sample.items():
        if ext.startswith("__"):
            continue
        with open(os.path.join(workdir, f"{base}.{ext}"), "wb") as stream:
            stream.write(wlcommon.field_bytes(value))


def run_command(command: str, workdir: str, key: str, timeout: float | None) -> str | None:
    """Run `command` with /bin/sh in `workdir` with $KEY set; None on success, else what went wrong.

    The command runs in its own session. Its whole process group is killed when it ends (nothing it
    started in the background survives), on timeout, and in a worker told to stop (should_stop()).
    """
    if should_stop():
        return "stopped: wl-xargs is exiting"
    env = dict(os.environ, KEY=key)
    with _starting:
        proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        _running.add(proc.pid)
    try:
        return _wait(proc, timeout)
    finally:
        _kill_group(proc.pid)
        _running.discard(proc.pid)
        proc.wait(timeout=10)


def _wait(proc: subprocess.Popen, timeout: float | None) -> str | None:
    """Wait for `proc`: None when it exits 0, else why it failed (status, timeout, told to stop)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = _POLL_S if deadline is None else min(_POLL_S, max(deadline - time.monotonic(), 0.0))
        try:
            status = proc.wait(timeout=step)
            return None if status == 0 else f"exited with status {status}"
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline:
                return f"timed out after {timeout} s"
            if should_stop():
                return "stopped: wl-xargs is exiting"


def _kill_group(group: int) -> None:
    """Kill what is left of process group `group` (a command's own session)."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


def collect(workdir: str, key: str, job: Job) -> dict:
    """The output sample: {"__key__": key, EXT: bytes} for each regular file NAME.EXT left in workdir."""
    out: dict = {"__key__": key}
    for name in sorted(os.listdir(workdir)):
        path = os.path.join(workdir, name)
        if name.startswith(".") or "." not in name or not os.path.isfile(path):
            continue
        if job.include is not None and not re.search(job.include, name):
            continue
        if job.exclude is not None and re.search(job.exclude, name):
            continue
        ext = name.split(".", 1)[1].lower()
        if ext in out:
            raise SampleError(f"sample {key!r}: two output files with extension {ext!r} ({name})", member=name)
        with open(path, "rb") as stream:
            out[ext] = stream.read()
    return out
