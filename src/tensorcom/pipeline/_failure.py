"""The one failure record: what a worker (thread or process) reports when its work raised, and how
the consumer turns that report, or a worker's silent death, into the library's errors.

    Failure.capture(exc, worker, position)   in the worker, inside `except`
    failure.error("map worker")              in the consumer: errors.WorkerError
    died("portion worker", index, proc)      in the consumer: errors.WorkerDied

A Failure is plain data (index, position, key, type name, message, traceback text), so it crosses a
process boundary without pickling the exception itself, which may not be picklable. In a thread the
exception also rides along as `cause` (never pickled) and becomes the WorkerError's `__cause__`.
The consumer's WorkerError keeps the record as its `failure` attribute.
"""

from __future__ import annotations

import traceback as tb
from dataclasses import dataclass, field
from typing import Any

from tensorcom.errors import WorkerDied, WorkerError


@dataclass(frozen=True)
class Failure:
    """One worker's failure: `worker` index (None when unknown), `position` of the failing item in
    the worker's input or output when known, the sample `key` when known, the exception's type
    name and message, and its formatted traceback."""

    worker: int | None
    position: int | None
    key: str | None
    exc_type: str
    message: str
    traceback: str
    cause: BaseException | None = field(default=None, compare=False, repr=False)

    @classmethod
    def capture(cls, exc: BaseException, worker: int | None = None, position: int | None = None, *,
                key: str | None = None, message: str | None = None) -> Failure:
        """The record of `exc`. The key is `key`, else the one noted on `exc` (stages.note_key) or
        carried by a WorkerError; a WorkerError from a nested worker keeps that worker's traceback."""
        if key is None:
            key = getattr(exc, "key", None) if isinstance(exc, WorkerError) else getattr(exc, "tensorcom_key", None)
        if message is None:
            message = _own_message(exc)
        remote = getattr(exc, "remote_traceback", "") if isinstance(exc, WorkerError) else ""
        text = remote or "".join(tb.format_exception(exc))
        return cls(worker, position, key, type(exc).__name__, message, text, exc)

    def __reduce__(self) -> tuple:
        """Pickled without `cause`: only plain data leaves the worker's process."""
        return (Failure, (self.worker, self.position, self.key, self.exc_type, self.message, self.traceback))

    def error(self, role: str) -> WorkerError:
        """The WorkerError that the consumer raises: "ROLE N raised TYPE: MESSAGE (sample KEY)" with
        the traceback, the key, this record as `failure`, and the exception as `__cause__` if here."""
        who = role if self.worker is None else f"{role} {self.worker}"
        error = WorkerError(f"{who} raised {self.exc_type}: {self.message}", self.traceback, self.key)
        error.failure = self  # type: ignore[attr-defined]
        error.__cause__ = self.cause
        return error


def _own_message(exc: BaseException) -> str:
    """str(exc); for a WorkerError only its first line, without the key it appends (the record has it)."""
    if not isinstance(exc, WorkerError):
        return str(exc)
    first = (str(exc).splitlines() or [""])[0]
    suffix = f" (sample {exc.key!r})"
    return first[: -len(suffix)] if exc.key is not None and first.endswith(suffix) else first


def describe_exit(code: int | None) -> str:
    """How a process with exit code `code` ended, for WorkerDied messages ("exited with status 1")."""
    if code is None:
        return "closed its pipe"
    return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"


def died(role: str, index: int, worker: Any) -> WorkerDied:
    """The WorkerDied for `worker` (a Thread or a multiprocessing Process) that ended without a report."""
    pid = getattr(worker, "pid", None)
    if pid is None:
        return WorkerDied(f"{role} thread {index} ended unexpectedly")
    return WorkerDied(f"{role} process {index} (pid {pid}) {describe_exit(worker.exitcode)}")
