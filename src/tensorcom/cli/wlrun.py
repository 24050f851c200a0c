"""wl-xargs's per-sample work: write the fields into a temp dir, run the command there, collect files.

`run_sample(sample, job)` is a module-level function so that spawned workers can run it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from tensorcom.cli import wlcommon
from tensorcom.cli.wlpool import should_stop
from tensorcom.errors import SampleError, WorkerError

_POLL_S = 0.2


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
    workdir = tempfile.mkdtemp(prefix="wl-xargs-")
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


def write_inputs(workdir: str, sample: dict, base: str) -> None:
    """Write each non-metadata field EXT of `sample` as workdir/BASE.EXT."""
    for ext, value in sample.items():
        if ext.startswith("__"):
            continue
        with open(os.path.join(workdir, f"{base}.{ext}"), "wb") as stream:
            stream.write(value.encode("utf-8") if isinstance(value, str) else value)


def run_command(command: str, workdir: str, key: str, timeout: float | None) -> str | None:
    """Run `command` with /bin/sh in `workdir` with $KEY set; None on success, else what went wrong.

    The command runs in its own session. Its whole process group is killed when it ends (nothing it
    started in the background survives), on timeout, and in a worker told to stop (should_stop()).
    """
    env = dict(os.environ, KEY=key)
    proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        return _wait(proc, timeout)
    finally:
        _kill_group(proc)


def _wait(proc: subprocess.Popen, timeout: float | None) -> str | None:
    """Wait for `proc`: None when it exits 0, else why it failed (status, timeout, consumer gone)."""
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


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill what is left of the process group of `proc` (its own session) and reap `proc`."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


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
