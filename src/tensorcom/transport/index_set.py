"""`IndexSet`: a set of non-negative integers held as sorted, disjoint, half-open intervals — the batch
indices of one (epoch, portion) that a consumer was handed (tensorcom.transport.resume). Pure.

    taken = IndexSet([[0, 4], [6, 7]])    # {0, 1, 2, 3, 6}
    taken.add(4); 5 in taken              # False
    len(taken), taken.high                # 6 indices, 7 (one past the highest)
    list(taken.missing(9))                # [5, 7, 8]: the indices below 9 not in it
    taken | other                         # the union; taken.intervals: [[0, 5], [6, 7]]
"""

from __future__ import annotations

import bisect
from typing import Any, Iterable, Iterator


class IndexSet:
    """Sorted, disjoint, half-open intervals [start, stop) of ints >= 0 (module docstring).

    `intervals` may be given in any order and may overlap or touch; they are united. ValueError
    naming the interval for one that is not a pair of ints 0 <= start <= stop.
    """

    def __init__(self, intervals: Iterable[Any] = ()) -> None:
        self._starts: list[int] = []
        self._stops: list[int] = []
        for interval in sorted(_checked(interval) for interval in intervals):
            self._append(*interval)

    def _append(self, start: int, stop: int) -> None:
        """Add [start, stop) with start >= every start held (merging with the last interval)."""
        if start == stop:
            return
        if self._stops and start <= self._stops[-1]:
            self._stops[-1] = max(self._stops[-1], stop)
        else:
            self._starts.append(start)
            self._stops.append(stop)

    def add(self, index: int) -> None:
        """Put `index` (an int >= 0) in the set."""
        _checked((index, index + 1))
        at = bisect.bisect_right(self._starts, index)  # intervals [0, at) start at or before index
        if at and index < self._stops[at - 1]:
            return
        joins_left = at > 0 and self._stops[at - 1] == index
        joins_right = at < len(self._starts) and self._starts[at] == index + 1
        if joins_left and joins_right:
            self._stops[at - 1] = self._stops.pop(at)
            del self._starts[at]
        elif joins_left:
            self._stops[at - 1] = index + 1
        elif joins_right:
            self._starts[at] = index
        else:
            self._starts.insert(at, index)
            self._stops.insert(at, index + 1)

    @property
    def intervals(self) -> list[list[int]]:
        """The intervals as [[start, stop], ...], sorted, disjoint and not touching (JSON-ready)."""
        return [[start, stop] for start, stop in zip(self._starts, self._stops)]

    @property
    def high(self) -> int:
        """One past the highest index held (0 when empty): where a batch with no index counts."""
        return self._stops[-1] if self._stops else 0

    def missing(self, bound: int) -> Iterator[int]:
        """The indices 0 <= i < bound not in the set, in increasing order."""
        position = 0
        for start, stop in zip(self._starts, self._stops):
            if start >= bound:
                break
            yield from range(position, start)
            position = stop
        yield from range(position, bound)

    def __contains__(self, index: object) -> bool:
        if type(index) is not int:
            return False
        at = bisect.bisect_right(self._starts, index)
        return at > 0 and index < self._stops[at - 1]

    def __len__(self) -> int:
        return sum(stop - start for start, stop in zip(self._starts, self._stops))

    def __iter__(self) -> Iterator[int]:
        for start, stop in zip(self._starts, self._stops):
            yield from range(start, stop)

    def __or__(self, other: IndexSet) -> IndexSet:
        return IndexSet([*self.intervals, *other.intervals])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IndexSet) and self.intervals == other.intervals

    def __repr__(self) -> str:
        return f"IndexSet({self.intervals})"


def _checked(interval: Any) -> tuple[int, int]:
    """(start, stop) of a pair of ints with 0 <= start <= stop; ValueError naming it otherwise."""
    try:
        start, stop = interval
    except (TypeError, ValueError):
        start = stop = None
    if type(start) is not int or type(stop) is not int or not 0 <= start <= stop:
        raise ValueError(f"an interval of batch indices is [start, stop] with ints 0 <= start <= stop, "
                         f"got {interval!r}")
    return start, stop
