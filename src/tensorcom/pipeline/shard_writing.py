"""Writing shards in parallel processes (`tensorcom shard`): tensorcom.shards.convert plans the shards
and writes one run of them; here this process and N-1 helper processes write the runs.

    convert(source, "out/train-%06d.tar", maxcount=1000, processes=2, resume=False) -> Manifest
    run_claimed(work, tasks, processes, done=callback)       the same for any picklable work

Claiming. The tasks are independent; each process claims the next one from one shared counter
(a multiprocessing Value), so a fast process takes more of them and none waits for another. The
helpers are Processes (tensorcom.pipeline.processes: spawned, gone once this process is gone),
started by a thread, so that this process claims and writes tasks from the start while they boot.
A helper runs `Claims(work, tasks, counter)`: it claims tasks until none is left and answers
("item", ident, work(task)) for each, then ("end", ident, count). This process calls `done(result)`
for every task, its own and the helpers' (read with get(timeout=0) between its own tasks, then
until every task's result is in; a helper still booting then is stopped, not waited for). A helper's exception is a WorkerError naming it and its cause
("shard writer 0 raised ValueError: ..."), a helper that ended without its last word a WorkerDied;
either way, and always, the helpers are closed before run_claimed returns or raises.
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from tensorcom.pipeline._loop import POLL
from tensorcom.pipeline.processes import Entry, Processes
from tensorcom.progress import Progress
from tensorcom.shards.convert import ConvertInput, Manifest, prepare, write_run

ROLE = "shard writer"


def claim(counter: Any) -> int:
    """The next task index from the shared `counter` (a multiprocessing Value): each index goes to one
    claimer, whatever process it is in."""
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    return index


@dataclass(frozen=True)
class Claims:
    """A helper's work (Entry.work; its payload is the helper's index): `work(task)` for each task it
    claims from `counter`, until the tasks run out."""

    work: Callable[[Any], Any]
    tasks: Sequence
    counter: Any

    def __call__(self, ident: int) -> Iterator[Any]:
        while (index := claim(self.counter)) < len(self.tasks):
            yield self.work(self.tasks[index])


class _Helpers:
    """`count` helpers claiming `tasks` from `counter` (a fresh shared counter), started by a thread
    (Processes.start waits until every child holds the counter); `owner` is read once `started()`.
    `results`: how many results were passed to `done`, this process's own included (result())."""

    def __init__(self, count: int, work: Callable[[Any], Any], tasks: Sequence, done: Callable[[Any], None]):
        self.owner = Processes(ROLE, count)
        self.counter = self.owner.ctx.Value("q", 0)
        self.done, self.results, self.error = done, 0, None
        self.thread = threading.Thread(target=self._start, args=(Claims(work, tasks, self.counter),),
                                       name="tensorcom-shard-start", daemon=True)

    def _start(self, claims: Claims) -> None:
        try:
            self.owner.start(Entry(claims, first=None), shared=[claims.counter], name="tensorcom-shard")
        except BaseException as exc:  # raised in the caller's thread by started()
            self.error = exc

    def started(self, wait: bool = False) -> bool:
        """Whether the helpers are started (waiting for that with `wait`); their start's error raised."""
        if wait:
            self.thread.join()
        if self.error is not None:
            raise self.error
        return not self.thread.is_alive()

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
        it started are terminated, so that it ends."""
        while self.thread.is_alive():
            for proc in list(self.owner.procs):
                if proc.is_alive():
                    proc.terminate()
            self.thread.join(POLL)
        self.owner.close()


def run_claimed(work: Callable[[Any], Any], tasks: Sequence, processes: int, *,
                done: Callable[[Any], None] = lambda result: None) -> None:
    """Run `work(task)` for every task here and in min(processes, len(tasks)) - 1 helpers, calling
    `done(result)` here for each (module docstring); `work` is a picklable module-level callable (or a
    functools.partial of one), `tasks` picklable. Returns once every task is done: helpers still
    booting then are stopped, not waited for."""
    count = max(0, min(processes, len(tasks)) - 1)
    if count == 0:
        for task in tasks:
            done(work(task))
        return
    helpers = _Helpers(count, work, tasks, done)
    try:
        helpers.thread.start()
        while (index := claim(helpers.counter)) < len(tasks):
            helpers.result(work(tasks[index]))
            if helpers.started():
                helpers.read(until=None)
        if helpers.results < len(tasks):  # the helpers hold the rest
            helpers.started(wait=True)
            helpers.read(until=len(tasks))
    finally:
        helpers.close()


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

    try:
        manifest, tasks = prepare(source, pattern, maxcount=maxcount, maxsize=maxsize, format=format,
                                  processes=processes, resume=resume)
        if shown is not None:
            kept = set(manifest.kept)
            shown.update(sum(s.count for s in manifest.shards if s.name in kept), shards=len(kept))
        directory = os.path.dirname(pattern) or "."
        run_claimed(functools.partial(write_run, source, directory, format), tasks, processes, done=finished)
    finally:
        if shown is not None:
            shown.close()
    return manifest
