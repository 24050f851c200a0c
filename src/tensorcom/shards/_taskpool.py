"""A list of independent tasks run by this process and N-1 spawned helpers, each claiming the next task
from one shared counter: the converter's pool (tensorcom.shards.convert).

    run_tasks(work, tasks, processes, init=..., init_args=(...), done=callback)

This process starts working at once (a helper's job reaches it through a queue), so a short job never
waits for the helpers to start; a helper that starts after the last task was claimed leaves without
work. Messages from a helper, on one queue: ("done", index, result) after each task, ("error", index,
traceback text) when `work` raised (it then exits with status 1). The parent calls `done(result)` for
every task, raises WorkerError for a helper's error and WorkerDied for a helper that ended holding a
task, and always terminates and joins the helpers before it returns or raises. A helper whose parent is
gone claims nothing more.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import traceback
from typing import Any, Callable, Sequence

from tensorcom.errors import WorkerDied, WorkerError

_POLL = 0.5  # seconds between checks of the helpers' exit codes while waiting for their results


def _claim(counter: Any) -> int:
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    return index


def _helper_main(jobs: Any, counter: Any, results: Any, parent: int) -> None:
    """A helper: read the job from `jobs`, claim tasks until none is left (or the parent is gone),
    report each on `results`."""
    work, tasks, init, init_args = jobs.get()
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


def run_tasks(work: Callable[[Any], Any], tasks: Sequence, processes: int, *, init: Callable | None = None,
              init_args: tuple = (), done: Callable[[Any], None] = lambda result: None) -> None:
    """Run `work(task)` for every task here and in `processes` - 1 spawned helpers (module docstring);
    `work` and `init` are module-level functions, `tasks` and `init_args` picklable."""
    if init is not None:
        init(*init_args)
    helpers = min(processes, len(tasks)) - 1
    if helpers <= 0:
        for task in tasks:
            done(work(task))
        return
    context = multiprocessing.get_context("spawn")
    counter, results, jobs = context.Value("q", 0), context.Queue(), context.Queue()
    children = [context.Process(target=_helper_main, name=f"tensorcom-shard-{n}", daemon=True,
                                args=(jobs, counter, results, os.getpid())) for n in range(helpers)]
    try:
        for child in children:  # the job goes through a queue (its feeder thread), so start() does not wait
            jobs.put((work, tasks, init, init_args))
            child.start()
        ours = 0
        while (index := _claim(counter)) < len(tasks):
            done(work(tasks[index]))
            ours += 1
        _collect(results, children, len(tasks) - ours, done)
    finally:
        for child in children:
            if child.pid is not None and child.is_alive():
                child.terminate()
            if child.pid is not None:
                child.join()
        for channel in (jobs, results):
            channel.cancel_join_thread()  # what a terminated helper did not read is dropped
            channel.close()


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
