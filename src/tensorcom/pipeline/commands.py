"""A shell command per sample, as wl-xargs runs it: write the sample's fields as files into a fresh
temporary directory, run the command there, collect the files it leaves as the output sample.

    run_sample(sample, CommandJob("convert sample.jpg sample.png && rm sample.jpg"))  -> output sample

`run_sample` is a module-level function so that spawned workers (tensorcom.pipeline.workers) can run it.

In a worker process a command must not outlive the tool: the first command a worker runs sets up
`watch_for_stop`: SIGTERM (the pool's last word before SIGKILL) only sets a flag that the waiting
loop polls, and the worker's parent-death watcher (tensorcom.pipeline._watch) kills every running
command's process group and removes the temporary directories before it ends the worker.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from tensorcom.errors import SampleError, WorkerError
from tensorcom.pipeline._watch import on_parent_death, watching

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
    """Once, in a worker process (one whose parent is watched): SIGTERM sets the stop flag, and the
    parent-death watcher runs _clean_up. Does nothing elsewhere."""
    global _watching
    if _watching or not watching() or threading.current_thread() is not threading.main_thread():
        return
    _watching = True
    signal.signal(signal.SIGTERM, _request_stop)
    on_parent_death(_clean_up)


def _request_stop(*_: object) -> None:
    """SIGTERM handler: only set the flag, so that no exception cuts a command's cleanup short."""
    global _stop_requested
    _stop_requested = True


def _clean_up() -> None:
    """Run by the parent-death watcher, just before it ends this process: kill the running commands
    and remove their directories."""
    _starting.acquire()  # never released: no command may start after this
    for group in list(_running):
        _kill_group(group)
    for workdir in list(_workdirs):
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass(frozen=True)
class CommandJob:
    """What to do with each sample: the shell command, the base name of its input files (BASE.EXT),
    the seconds it may run (None: no limit), regexes of the output file names to collect (`include`)
    or leave (`exclude`), and whether a failed command drops the sample instead of stopping."""

    command: str
    base: str = "sample"
    timeout: float | None = None
    include: str | None = None
    exclude: str | None = None
    skip_errors: bool = False


def run_sample(sample: dict, job: CommandJob) -> dict | tuple:
    """The output sample ({"__key__": key, EXT: bytes}) for one input sample (its fields that do not
    start with "__" become the input files), or ("failed", key, why) when the command failed and
    job.skip_errors is set; a failed command otherwise raises WorkerError naming the key."""
    key = str(sample.get("__key__", ""))
    watch_for_stop()
    workdir = tempfile.mkdtemp(prefix="wl-xargs-")
    _workdirs.add(workdir)
    try:
        write_inputs(workdir, sample, job.base)
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
    """Write each non-metadata field EXT of `sample` as workdir/BASE.EXT (str as UTF-8, bytes as they are)."""
    for ext, value in sample.items():
        if ext.startswith("__"):
            continue
        with open(os.path.join(workdir, f"{base}.{ext}"), "wb") as stream:
            stream.write(value.encode("utf-8") if isinstance(value, str) else bytes(value))


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


def collect(workdir: str, key: str, job: CommandJob) -> dict:
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
