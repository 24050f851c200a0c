"""Writing shards in parallel processes (`tensorcom shard`): tensorcom.shards.convert plans the shards
and writes one run of them; here this process and N-1 helper processes write the runs.

    convert(source, "out/train-%06d.tar", maxcount=1000, processes=2, resume=False) -> Manifest
    run_claimed(work, tasks, processes, done=callback)      the same for any picklable work
    with Helpers(N - 1, work) as helpers:                   they boot while the tasks are planned
        helpers.run(tasks, done=callback)

Claiming. The tasks are independent; each process claims the next one from one shared counter
(a multiprocessing Value), so a fast process takes more of them and none waits for another. The
helpers are Processes (tensorcom.pipeline.processes: spawned, gone once this process is gone),
started by a thread, so that this process claims and writes tasks from the start while they boot.
A helper runs `Claims(work, counter)` on the task list (its one job, from a queue): it claims tasks
until none is left and answers ("item", 0, work(task)) for each, then ("end", 0, count). This process
calls `done(result)` for every task, its own and the helpers' (read with get(timeout=0) between its
own tasks, then until every task's result is in; a helper still booting then is stopped, not waited
for). A helper's exception is a WorkerError naming it and its cause ("shard writer 0 raised
ValueError: ..."), a helper that ended without its last word a WorkerDied; either way, and always,
the helpers are closed before run() returns or raises.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from tensorcom.pipeline._loop import POLL
from tensorcom.pipeline.processes import Entry, Processes
from tensorcom.progress import Progress
from tensorcom.shards.convert import ConvertInput, Manifest, check_options, prepare, write_run

ROLE = "shard writer"


def claim(counter: Any) -> int:
    """The next task index from the shared `counter` (a multiprocessing Value): each index goes to one
    claimer, whatever process it is in."""
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    return index


class _Counter:
    """The shared counter's interface, for this process alone (no helper)."""

    value = 0

    def get_lock(self) -> contextlib.nullcontext:
        return contextlib.nullcontext()


@dataclass(frozen=True)
class Claims:
    """A helper's work (Entry.work; its payload is the job's task list): `work(task)` for each task it
    claims from `counter`, until the tasks run out."""

    work: Callable[[Any], Any]
    counter: Any

    def __call__(self, tasks: Sequence) -> Iterator[Any]:
        while (index := claim(self.counter)) < len(tasks):
            yield self.work(tasks[index])


class Helpers:
    """`count` helper processes running `work` on claimed tasks, for one job: start() (they boot while
    the caller plans), run(tasks, done), close() (always; a context manager). The task list reaches them
    through a queue (one job each, then None)."""

    def __init__(self, count: int, work: Callable[[Any], Any]):
        self.owner, self.counter, self.jobs = None, _Counter(), None  # no helper: nothing shared
        if count > 0:
            self.owner = Processes(ROLE, count)
            self.counter, self.jobs = self.owner.ctx.Value("q", 0), self.owner.ctx.Queue()
        self.work, self.done, self.results, self.error = work, None, 0, None
        self.thread: threading.Thread | None = None

    def _start(self, sent: Callable[[Any], Any]) -> None:
        try:
            self.owner.start(Entry(Claims(sent, self.counter), inbox=self.jobs, first=None),
                             shared=[self.counter, self.jobs], name="tensorcom-shard")
        except BaseException as exc:  # raised in the caller's thread by started()
            self.error = exc

    def start(self) -> Helpers:
        """Start the helpers (by a thread: Processes.start waits until every child holds the counter)."""
        if self.owner is not None:  # the helpers' `work` is copied here: the caller may change its own meanwhile
            sent = pickle.loads(pickle.dumps(self.work))
            self.thread = threading.Thread(target=self._start, args=(sent,), name="tensorcom-shard-start",
                                           daemon=True)
            self.thread.start()
        return self

    def started(self, wait: bool = False) -> bool:
        """Whether the helpers are started (waiting for that with `wait`); their start's error raised."""
        if wait and self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error
        return self.thread is not None and not self.thread.is_alive()

    def run(self, tasks: Sequence, *, done: Callable[[Any], None] = lambda result: None) -> None:
        """`work(task)` for every task here and in the helpers, `done(result)` here for each; returns once
        every task is done (module docstring)."""
        self.done = done
        if self.owner is not None and len(tasks) > 1:
            for job in [(0, None, tasks)] * self.owner.count + [None] * self.owner.count:
                self.jobs.put(job)
        while (index := claim(self.counter)) < len(tasks):
            self.result(self.work(tasks[index]))
            if self.started():
                self.read(until=None)
        if self.results < len(tasks):  # the helpers hold the rest
            self.started(wait=True)
            self.read(until=len(tasks))

    def result(self, value: Any) -> None:
        self.results += 1
        self.done(value)

    def read(self, until: int | None) -> None:
        """Pass the helpers' results to `done`: those there are (until None), or until `until` results
        were passed in all. WorkerError for a helper's failure, WorkerDied for a helper's death."""
        while until is None or self.results < until:
            message = self.owner.get(timeout=0) if until is None else self.owner.next()
            if message is None:
                return
            kind, _, value = message
            if kind == "error":
                raise value.error(ROLE)
            if kind == "item":
                self.result(value)

    def close(self) -> None:
        """Stop the helpers; a start still under way (nothing left for them) is cut short: the children
        it started are terminated, so that it ends. What they did not read of the queue is dropped."""
        while self.thread is not None and self.thread.is_alive():
            for proc in list(self.owner.procs):
                if proc.is_alive():
                    proc.terminate()
            self.thread.join(POLL)
        if self.owner is not None:
            self.owner.close()
            self.jobs.cancel_join_thread()
            self.jobs.close()

    def __enter__(self) -> Helpers:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_claimed(work: Callable[[Any], Any], tasks: Sequence, processes: int, *,
                done: Callable[[Any], None] = lambda result: None) -> None:
    """Helpers(min(processes, len(tasks)) - 1, work).run(tasks, done), for a job known in advance;
    `work` is a picklable module-level callable (or a functools.partial of one), `tasks` picklable."""
    with Helpers(max(0, min(processes, len(tasks)) - 1), work) as helpers:
        helpers.run(tasks, done=done)


def convert(source: ConvertInput, pattern: str, *, maxcount: int = 10000, maxsize: float | None = None,
            format: str = "tar", processes: int = 1, resume: bool = False, progress: bool | Progress = False
            ) -> Manifest:
    """Write `source` as shards `pattern % n` (tensorcom.shards.convert's docstring) with `processes`
    processes; returns the Manifest (`kept`: the shard names resume left alone). ValueError for bad
    options and for a resume the manifest refuses; the shards are the same for any `processes`."""
    shown = Progress("tensorcom shard") if progress is True else (progress or None)

    def finished(done: list[tuple[str, int]]) -> None:
        if shown is not None:
            shown.update(sum(n for _, n in done), shards=shown.extra.get("shards", 0) + len(done))

    check_options(pattern, format, processes)
    work = functools.partial(write_run, source, os.path.dirname(pattern) or ".", format)
    try:
        with Helpers(processes - 1, work) as helpers:  # they boot while the input is planned
            manifest, tasks = prepare(source, pattern, maxcount=maxcount, maxsize=maxsize, format=format,
                                      processes=processes, resume=resume)
            if shown is not None:
                kept = set(manifest.kept)
                shown.update(sum(s.count for s in manifest.shards if s.name in kept), shards=len(kept))
            helpers.run(tasks, done=finished)
    finally:
        if shown is not None:
            shown.close()
    return manifest
