"""A list of independent tasks run by this process and N-1 spawned helpers, each claiming the next task
from one shared counter: the converter's pool (tensorcom.shards.convert).

    with Helpers(processes - 1) as helpers:     # spawned now
        ...                                     # plan the tasks meanwhile
        helpers.run(work, tasks, init=..., init_args=(...), done=callback)
    run_tasks(work, tasks, processes, init=..., init_args=(...), done=callback)     # both at once

This process starts working at once (a helper's job reaches it through a queue), so a short job never
waits for the helpers to start; a helper that starts after the last task was claimed leaves without
work. Messages from a helper, on one queue: ("done", index, result) after each task, ("error", index,
traceback text) when `work` raised (it then exits with status 1). The parent calls `done(result)` for
every task, raises WorkerError for a helper's error and WorkerDied for a helper that ended holding a
task, and always terminates and joins the helpers before it returns or raises. A helper whose parent is
gone claims nothing more.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import traceback
from typing import Any, Callable, Sequence

from tensorcom.errors import WorkerDied, WorkerError

_POLL = 0.5  # seconds between checks of the helpers' exit codes while waiting for their results


class _Counter:
    """The shared counter's interface, for this process alone."""

    value = 0

    def get_lock(self) -> contextlib.nullcontext:
        return contextlib.nullcontext()


def _claim(counter: Any) -> int:
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    return index


def _helper_main(jobs: Any, counter: Any, results: Any, parent: int) -> None:
    """A helper: wait for the job on `jobs`, claim tasks until none is left, report each on `results`;
    leave as soon as the parent is gone."""
    while True:
        try:
            work, tasks, init, init_args = jobs.get(timeout=_POLL)
            break
        except queue.Empty:
            if os.getppid() != parent:
                return
    if init is not None:
        init(*init_args)
    while os.getppid() == parent:
        index = _claim(counter)
        if index >= len(tasks):
            return
        try:
            results.put(("done", index, work(tasks[index])))
        except BaseException:
            results.put(("error", index, traceback.format_exc()))
            results.close()
            results.join_thread()
            raise SystemExit(1)


class Helpers:
    """`count` spawned helpers, started at once (so that their start-up overlaps the caller's planning)
    and given their one job by run(). A context manager: leaving it terminates and joins them."""

    def __init__(self, count: int):
        self.children: list = []
        if count <= 0:  # no helper: no shared counter, queues or processes
            self.counter, self.results, self.jobs = _Counter(), None, None
            return
        context = multiprocessing.get_context("spawn")
        self.counter, self.results, self.jobs = context.Value("q", 0), context.Queue(), context.Queue()
        self.children = [context.Process(target=_helper_main, name=f"tensorcom-shard-{n}", daemon=True,
                                         args=(self.jobs, self.counter, self.results, os.getpid()))
                         for n in range(count)]
        try:
            for child in self.children:
                child.start()
        except BaseException:
            self.close()
            raise

    def run(self, work: Callable[[Any], Any], tasks: Sequence, *, init: Callable | None = None,
            init_args: tuple = (), done: Callable[[Any], None] = lambda result: None) -> None:
        """Run `work(task)` for every task here and in the helpers (module docstring); `work` and `init`
        are module-level functions, `tasks` and `init_args` picklable."""
        if init is not None:
            init(*init_args)
        if len(tasks) > 1:
            for _ in self.children:  # through a queue (its feeder thread): this process goes on at once
                self.jobs.put((work, tasks, init, init_args))
        ours = 0
        while (index := _claim(self.counter)) < len(tasks):
            done(work(tasks[index]))
            ours += 1
        _collect(self.results, self.children, len(tasks) - ours, done)

    def close(self) -> None:
        for child in self.children:
            if child.pid is not None and child.is_alive():
                child.terminate()
            if child.pid is not None:
                child.join()
        for channel in (self.jobs, self.results):
            if channel is not None:
                channel.cancel_join_thread()  # what a terminated helper did not read is dropped
                channel.close()

    def __enter__(self) -> Helpers:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_tasks(work: Callable[[Any], Any], tasks: Sequence, processes: int, *, init: Callable | None = None,
              init_args: tuple = (), done: Callable[[Any], None] = lambda result: None) -> None:
    """Helpers(processes - 1).run(...) for a job known in advance."""
    with Helpers(max(0, min(processes, len(tasks)) - 1)) as helpers:
        helpers.run(work, tasks, init=init, init_args=init_args, done=done)


def _collect(results: Any, children: list, expected: int, done: Callable[[Any], None]) -> None:
    """Receive `expected` "done" messages from the helpers; raise for an error or a helper that died."""
    while expected:
        try:
            kind, index, value = results.get(timeout=_POLL)
        except queue.Empty:
            dead = [c for c in children if c.exitcode not in (None, 0)]
            if dead and all(not c.is_alive() for c in children) and results.empty():
                raise WorkerDied(f"shard writer {dead[0].name} (pid {dead[0].pid}) ended with status "
                                 f"{dead[0].exitcode} holding a task") from None
            continue
        if kind == "error":
            last = value.strip().splitlines()[-1] if value.strip() else "no traceback"
            raise WorkerError(f"a helper failed on task {index}: {last}", remote_traceback=value)
        done(value)
        expected -= 1
