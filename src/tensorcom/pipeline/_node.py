"""The node contract: every source and stage of a pipeline is an iterator with a position.

    node = Mapped(upstream, fn)            built at the start of an epoch, positioned at its beginning
    next(node)                             the next item (StopIteration at the end of the epoch)
    node.state_dict()                      where it stands: plain dicts, lists and numbers
    node.load_state_dict(state)            go there (None: the beginning); the next items are exactly
                                           those that followed when `state` was taken
    node.close()                           stop what it started (threads, processes, open shards)

A stage's state holds its upstream's under "up", so the state of the last node is the state of the
whole chain. Nothing starts in a constructor: threads, processes and files open on the first next().
The design follows torchdata.nodes (BaseNode: next / reset / get_state); positions are exact because
every source and stage is deterministic given (seed, epoch, portion), so a node may also restore by
replaying its input and skipping what it had yielded (`Replayed`, `skip`).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Iterator

State = dict[str, Any]


class Node:
    """Base class of sources and stages with an upstream node `up` (None for sources)."""

    up: Any = None

    def __iter__(self) -> Node:
        return self

    def __next__(self) -> Any:
        raise NotImplementedError

    def state_dict(self) -> State:
        """The position: this node's fields plus {"up": upstream state}."""
        raise NotImplementedError

    def load_state_dict(self, state: State | None) -> None:
        """Continue after the items that preceded `state`; None: from the beginning of the epoch."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop this node's helpers and its upstream's."""
        if self.up is not None:
            self.up.close()


def upstream_state(state: State | None) -> State | None:
    """The "up" part of a stage's state (None for None)."""
    return None if state is None else state["up"]


class Passing(Node):
    """A stage with no position of its own (filter, batch): its state is {"up": upstream state}."""

    def state_dict(self) -> State:
        return {"up": self.up.state_dict()}

    def load_state_dict(self, state: State | None) -> None:
        self.up.load_state_dict(upstream_state(state))


class Counting(Node):
    """A stage whose position is `position`, the number of upstream items it has taken (map, slice):
    its state is {"up": upstream state, "position": position}."""

    position = 0

    def state_dict(self) -> State:
        return {"up": self.up.state_dict(), "position": self.position}

    def load_state_dict(self, state: State | None) -> None:
        self.up.load_state_dict(upstream_state(state))
        self.position = 0 if state is None else int(state["position"])


def skip(node: Iterator[Any], count: int) -> int:
    """Take and drop `count` items of `node`; returns how many there were (fewer at its end). A node
    with a `pass_over(count)` method (a 1:1 map, a batch) passes over them without computing them,
    where what comes after is the same either way (its randomness is keyed by position)."""
    pass_over = getattr(node, "pass_over", None)
    if pass_over is not None:
        return pass_over(count)
    return sum(1 for _ in itertools.islice(node, count))


def with_states(node: Node) -> Iterator[tuple[Any, State]]:
    """(item, node.state_dict() right after it) for each item: for helpers that compute ahead (threads,
    processes), so the consumer knows the position of what it has taken."""
    for item in node:
        yield item, node.state_dict()


class Replayed(Node):
    """A source from a function returning a fresh iterator for the epoch; its state is the number of
    items yielded, restored by iterating again and skipping them (the fallback for any source)."""

    def __init__(self, make: Callable[[], Iterable[Any]]):
        self.make = make
        self.count = 0
        self._items: Iterator[Any] | None = None

    def __next__(self) -> Any:
        if self._items is None:
            self._items = iter(self.make())
            skip(self._items, self.count)
        item = next(self._items)
        self.count += 1
        return item

    def state_dict(self) -> State:
        return {"count": self.count}

    def load_state_dict(self, state: State | None) -> None:
        self.close()
        self.count = 0 if state is None else int(state["count"])

    def close(self) -> None:
        close, self._items = getattr(self._items, "close", None), None
        if close is not None:
            close()


class Indexed(Node):
    """A source that yields items[order[i]] for i = position, position + 1, ...; its state is the
    position, restored without touching the items before it."""

    def __init__(self, items: Any, order: Any, read: Callable[[Any], Any] | None = None):
        self.items, self.order, self.read = items, order, read
        self.position = 0

    def __next__(self) -> Any:
        if self.position >= len(self.order):
            raise StopIteration
        item = self.items[int(self.order[self.position])]
        self.position += 1
        return item if self.read is None else self.read(item)

    def state_dict(self) -> State:
        return {"position": self.position}

    def load_state_dict(self, state: State | None) -> None:
        position = 0 if state is None else int(state["position"])
        if not 0 <= position <= len(self.order):
            raise ValueError(f"position {position} is outside this source's {len(self.order)} items")
        self.position = position
