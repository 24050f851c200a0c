"""`Watch`: a thread that does an owner's work while the owner is away, and stops when it is back.

    watch = Watch("tensorcom-floor-NAME")
    watch.start(step, ended=(zmq.ZMQError,))   # step() until it returns True, or until stop()
    watch.stop()                               # the owner is back: no step runs after this returns

`step` must not block; between steps the thread waits `every` seconds on its stop event, so stop()
returns within about that long (it joins the thread, unless called from it: then the step in progress
is its last). An exception of a type in `ended` ends the watch quietly (what the step used was closed
under it); the owner shuts it down with stop().
"""

from __future__ import annotations

import threading
from typing import Callable


class Watch:
    """One owner's watch thread (module docstring); at most one runs at a time."""

    def __init__(self, name: str, every: float = 0.01):
        self.name, self.every = name, every
        self.thread: threading.Thread | None = None
        self.halt = threading.Event()

    def start(self, step: Callable[[], bool], ended: tuple = ()) -> None:
        """Stop the watch running (if any), then run `step` in a new one."""
        self.stop()
        self.halt = threading.Event()
        self.thread = threading.Thread(target=_loop, args=(step, self.halt, self.every, ended), name=self.name,
                                       daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """The owner is back: after this returns (from another thread than the watch's) no step runs."""
        thread, self.thread = self.thread, None
        if thread is not None:
            self.halt.set()
            if thread is not threading.current_thread():
                thread.join()


def _loop(step: Callable[[], bool], halt: threading.Event, every: float, ended: tuple) -> None:
    try:
        while not halt.is_set() and not step():
            halt.wait(every)
    except ended:
        return
