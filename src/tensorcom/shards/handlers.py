"""Bad-data policies: what a reader does when a shard or a sample is bad.

A handler takes the exception and returns True to skip the bad item and go on, or raises (or returns
False) to stop. The three policies below are the only ones the package defines; any callable with the
same contract works. `SkipCounts` records what was skipped; readers bump it through `handle`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

Handler = Callable[[BaseException], bool]


def reraise_exception(exn: BaseException) -> bool:
    """Stop at the first bad item: raise `exn` again (the default policy)."""
    raise exn


def warn_and_continue(exn: BaseException) -> bool:
    """Skip the bad item after a `RuntimeWarning` that carries the error text; returns True."""
    warnings.warn(f"skipping bad data: {type(exn).__name__}: {exn}", RuntimeWarning, stacklevel=2)
    return True


def ignore_and_continue(exn: BaseException) -> bool:
    """Skip the bad item silently; returns True."""
    return True


@dataclass
class SkipCounts:
    """How many samples and shards a reader skipped under a continuing policy, and the text of the
    first 100 errors that caused a skip ("TypeName: message")."""

    samples: int = 0
    shards: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        """{"samples": n, "shards": m}."""
        return {"samples": self.samples, "shards": self.shards}


def handle(exn: BaseException, handler: Handler | None, counts: SkipCounts | None, kind: str) -> None:
    """Apply `handler` (None = reraise) to `exn`; on a skip, count one `kind` ("samples" or "shards").

    Returns normally when the item is to be skipped; raises `exn` when the policy stops.
    """
    if kind not in ("samples", "shards"):
        raise ValueError(f"kind must be 'samples' or 'shards', not {kind!r}")
    if handler is None or not handler(exn):
        raise exn
    if counts is not None:
        setattr(counts, kind, getattr(counts, kind) + 1)
        if len(counts.errors) < 100:
            counts.errors.append(f"{type(exn).__name__}: {exn}")
