"""`Sliced`: the stage of Pipeline.slice, items start, start + step, ... (before stop) of its upstream.

    Sliced(up, start, stop, step)        like itertools.islice(up, start, stop, step), with a state
    slice_bounds(*args)                  (start, stop, step) from slice()'s arguments, checked
    sliced_length(size, start, stop, step)   how many items come out of `size` items in

State: {"up": the upstream's, "position": items taken from the upstream}, so a restored slice
goes on exactly where it stood. It stops reading its upstream once it has passed `stop`.
"""

from __future__ import annotations

from typing import Any

from tensorcom.pipeline._node import Counting


def slice_bounds(*args: int | None) -> tuple[int, int | None, int]:
    """(start, stop, step) as `slice(*args)` reads them: slice(stop), slice(start, stop[, step]).
    ValueError for anything but non-negative integers (stop may be None; step at least 1)."""
    if not 1 <= len(args) <= 3:
        raise TypeError(f"slice takes 1 to 3 arguments (stop, or start, stop[, step]), got {len(args)}")
    bounds = slice(*args)
    start, stop, step = bounds.start or 0, bounds.stop, 1 if bounds.step is None else bounds.step
    for name, value in (("start", start), ("stop", stop), ("step", step)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"slice {name} must be a non-negative integer, got {value!r}")
    if step < 1:
        raise ValueError(f"slice step must be at least 1, got {step!r}")
    return start, stop, step


def sliced_length(size: int | None, start: int, stop: int | None, step: int) -> int | None:
    """Items out of a slice of `size` items (None: unknown)."""
    if size is None:
        return None
    return len(range(start, size if stop is None else min(stop, size), step))


class Sliced(Counting):
    """Items start, start + step, ... before `stop` (None: to the end) of the upstream."""

    def __init__(self, up: Any, start: int = 0, stop: int | None = None, step: int = 1):
        self.up, self.start, self.stop, self.step = up, start, stop, step
        self.position = 0  # upstream items taken so far

    def __next__(self) -> Any:
        while self.stop is None or self.position < self.stop:
            item = next(self.up)
            self.position += 1
            offset = self.position - 1 - self.start
            if offset >= 0 and offset % self.step == 0:
                return item
        raise StopIteration
