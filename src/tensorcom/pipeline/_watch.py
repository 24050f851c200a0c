"""The one parent-death watcher of every process tensorcom spawns (map, portion and serving workers).

    enter_worker_process(parent_pid)   first thing in a worker process: ignore Ctrl-C, watch the parent
    on_parent_death(cleanup)           also run cleanup() when the parent is gone, before exiting
    watching()                         whether this process is such a watched worker

A worker process ignores SIGINT: Ctrl-C reaches the whole process group, and the parent decides
(it sets the stop event and joins, or terminates). A daemon thread compares os.getppid() with the
parent's pid every `interval` seconds; once the parent is gone (even SIGKILLed, so that nothing
told the workers to stop) it runs the registered cleanups in order, then ends the process with
os._exit(1). So no worker outlives its parent by more than a fraction of a second, and code running
in a worker that owns resources the OS would not reclaim (child commands in their own sessions,
temporary directories) gets one chance to release them.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable

_cleanups: list[Callable[[], None]] = []
_watcher: threading.Thread | None = None


def enter_worker_process(parent_pid: int) -> None:
    """Set up a freshly spawned worker process: SIGINT ignored, the parent watched."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(parent_pid)


def watch_parent(parent_pid: int, interval: float = 0.2) -> threading.Thread:
    """Start (once per process) the daemon thread that ends this process once `parent_pid` is no
    longer its parent; returns that thread."""
    global _watcher
    if _watcher is None:
        _watcher = threading.Thread(target=_watch, args=(parent_pid, interval), name="tensorcom-parent-watch",
                                    daemon=True)
        _watcher.start()
    return _watcher


def on_parent_death(cleanup: Callable[[], None]) -> None:
    """Run `cleanup()` (in the watcher thread, before os._exit) if this process's parent dies.
    Registering does nothing more in a process that is not being watched."""
    _cleanups.append(cleanup)


def watching() -> bool:
    """True in a process whose parent is being watched (a worker process started by tensorcom)."""
    return _watcher is not None


def _watch(parent_pid: int, interval: float) -> None:
    while os.getppid() == parent_pid:
        time.sleep(interval)
    for cleanup in list(_cleanups):
        try:
            cleanup()
        except Exception:  # nobody is left to tell; the next cleanup and the exit still happen
            pass
    os._exit(1)
