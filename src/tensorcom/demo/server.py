"""The demo's data server: serve-imagenet-dir as a real subprocess, tied to this process's life.

    arguments = server_arguments(train_dir=..., url=..., batch_size=..., ...)   its command line
    with server_process(arguments, log) as proc: ...        runs it; terminated on every way out

The subprocess is `python -m tensorcom.cli.serve_imagenet dir ARGUMENTS`, its output going to `log`.
On Linux it also gets PR_SET_PDEATHSIG, so it ends when this process dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import socket
import subprocess
import sys
from typing import Iterator

MIN_SCALE = 0.35  # crops keep at least 35% of the image, so the shape stays in view


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def die_with_parent() -> None:
    """preexec_fn: ask Linux to send SIGTERM to this child when its parent dies (no-op elsewhere)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def server_arguments(*, train_dir: str, url: str, batch_size: int, size: int, epochs: int, workers: int,
                     seed: int, min_consumers: int = 1) -> list[str]:
    """The serve-imagenet-dir argument list (after the program name) that serves `train_dir` to `url`
    (a zshare/zsplit `url` once `min_consumers` have joined), with no rate reports."""
    sharing = ["--min-consumers", str(min_consumers)] if min_consumers != 1 else []
    return ["-d", train_dir, "-b", str(batch_size), "--size", str(size), "--epochs", str(epochs),
            "-P", str(workers), "--min-scale", str(MIN_SCALE), "--seed", str(seed), *sharing, "-r", "0", url]


def manual_commands(arguments: list[str], port: int) -> str:
    """The commands a user would type to do by hand what the demo does, in the README's `./run NAME`
    form (which works from the project folder without activating .venv)."""
    server = shlex.join(["./run", "serve-imagenet-dir", *arguments])
    monitor = shlex.join(["./run", "tensormon", f"zpull://127.0.0.1:{port}"])
    return (f"the same by hand, in two shells in the project folder (a training job reads the URL that "
            f"tensormon watches; with .venv activated, leave out ./run):\n  {server}\n  {monitor}")


@contextlib.contextmanager
def server_process(arguments: list[str], log) -> Iterator[subprocess.Popen]:
    """Run serve-imagenet-dir ARGUMENTS as a subprocess (stdout and stderr to `log`, a file; None: this
    process's own); stop it on exit."""
    command = [sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", *arguments]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
    try:
        yield proc
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """End `proc` if it still runs: SIGTERM, then SIGKILL after `grace` seconds; always reaped."""
    for action in (proc.terminate, proc.kill):
        if proc.poll() is not None:
            return
        action()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
