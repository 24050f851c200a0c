"""Stages that run on helpers (threads or spawned processes), as nodes whose state is exact.

    WorkerMapped(up, fn, plan)        map(fn, workers=N): fn on the worker pools of tensorcom.pipeline.workers
    Prefetched(up, size)              prefetch(size): the upstream computed ahead by a thread
    Parallel(launch, workers)         parallel(N): N portions of the stages before it, round-robin
                                      (tensorcom.pipeline._portions runs them)

Helpers compute ahead of the consumer, so a node's state is never the helpers' position but the
position of what the consumer has taken: a map tags each sample with its position and records the
upstream's state as it hands the sample out; a prefetch and each parallel portion send every item with
the state right after it (`_node.with_states`); a parallel stage also records whose turn is next. The
pools themselves keep no state: a restore gives the helpers (kept across epochs or not) the recorded
positions, and work they started ahead of it is dropped.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from tensorcom.pipeline._node import Node, State, skip, upstream_state, with_states
from tensorcom.pipeline.stages import RngKey, call
from tensorcom.pipeline.workers import WorkerPool, parallel_map, prefetching


class Tagged:
    """fn for a worker pool: (position, rng_key, sample) → (position, fn(sample) or fn(sample, rng)),
    so results can be matched to positions whatever order they finish in. Picklable when fn is."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, task: tuple[int, RngKey | None, Any]) -> tuple[int, Any]:
        position, rng_key, sample = task
        return position, call(self.fn, sample, rng_key, position)


@dataclass(frozen=True)
class MapPlan:
    """How a map runs on helpers: `workers` threads or processes, in order or not, `buffer` in flight
    (None: 2 × workers), on `pool` (a persistent WorkerPool of Tagged(fn)) when one is given."""

    workers: int
    processes: bool = False
    ordered: bool = True
    buffer: int | None = None
    rng_key: RngKey | None = None
    pool: WorkerPool | None = None


class Helped(Node):
    """A node whose helpers run behind the generator `_helpers` (None until the first next());
    closing that generator stops and joins them."""

    _helpers: Iterator | None = None

    def _stop(self) -> None:
        helpers, self._helpers = self._helpers, None
        if helpers is not None:
            helpers.close()

    def close(self) -> None:
        self._stop()
        super().close()


class WorkerMapped(Helped):
    """fn(sample) on helpers. State: the upstream's position after the longest prefix of samples
    whose results were yielded, that prefix's length, and the positions yielded beyond it (only with
    ordered=False); a restore skips those positions instead of sending them again."""

    def __init__(self, up: Node, fn: Callable, plan: MapPlan):
        self.up, self.fn, self.plan = up, fn, plan
        self._helpers: Iterator[tuple[int, Any]] | None = None
        self._position(None)

    def _position(self, state: State | None) -> None:
        self.prefix = 0 if state is None else int(state["position"])
        self.done = set() if state is None else {int(p) for p in state["done"]}
        self.prefix_state = upstream_state(state)
        self.pulled = self.prefix
        self.states: dict[int, State] = {}

    def _feed(self) -> Iterator[tuple[int, RngKey | None, Any]]:
        for sample in self.up:
            position, self.pulled = self.pulled, self.pulled + 1
            self.states[position] = self.up.state_dict()
            if position in self.done:
                self._advance()  # yielded before the checkpoint: not again
                continue
            yield position, self.plan.rng_key, sample

    def _advance(self) -> None:
        while self.prefix in self.done and self.prefix in self.states:
            self.done.remove(self.prefix)
            self.prefix_state = self.states.pop(self.prefix)
            self.prefix += 1

    def _start(self) -> Iterator[tuple[int, Any]]:
        plan = self.plan
        if plan.pool is not None and not plan.pool.busy:
            return plan.pool.map(self._feed(), ordered=plan.ordered, buffer=plan.buffer)
        return parallel_map(self._feed(), Tagged(self.fn), workers=plan.workers, processes=plan.processes,
                            ordered=plan.ordered, buffer=plan.buffer)

    def __next__(self) -> Any:
        if self.prefix_state is None:
            self.prefix_state = self.up.state_dict()
        if self._helpers is None:
            self._helpers = self._start()
        position, result = next(self._helpers)
        self.done.add(position)
        self._advance()
        return result

    def pass_over(self, count: int) -> int:
        """Skip `count` samples without sending them to the helpers when none is in flight (before the
        first next(), no restored positions pending; their rngs are keyed by position), else take and
        drop them; returns how many there were."""
        if self._helpers is not None or self.done:
            return sum(1 for _ in itertools.islice(self, count))
        done = skip(self.up, count)
        self.prefix = self.pulled = self.prefix + done
        self.prefix_state = self.up.state_dict()
        return done

    def state_dict(self) -> State:
        up = self.prefix_state if self.prefix_state is not None else self.up.state_dict()
        return {"up": up, "position": self.prefix, "done": sorted(self.done)}

    def load_state_dict(self, state: State | None) -> None:
        self._stop()
        self.up.load_state_dict(upstream_state(state))
        self._position(state)


class Prefetched(Helped):
    """The upstream's items, computed up to `size` ahead by a thread (workers.prefetching); each item
    comes with the upstream's state right after it, which is this node's state once it is taken."""

    def __init__(self, up: Node, size: int):
        self.up, self.size = up, size
        self.last: State | None = None
        self._helpers: Iterator[tuple[Any, State]] | None = None

    def __next__(self) -> Any:
        if self._helpers is None:
            if self.last is None:
                self.last = self.up.state_dict()
            self._helpers = prefetching(with_states(self.up), self.size)
        item, self.last = next(self._helpers)
        return item

    def state_dict(self) -> State:
        return {"up": self.last if self.last is not None else self.up.state_dict()}

    def load_state_dict(self, state: State | None) -> None:
        self._stop()
        self.up.load_state_dict(upstream_state(state))
        self.last = upstream_state(state)


class Parallel(Helped):
    """Items of `workers` portions, round-robin: `launch(order, states)` starts the portions listed in
    `order` (rotation order), portion s from position states[s], and returns an iterator of
    (portion, item, portion state after it). State: the rotation still to come and each portion's
    position (under the key "shares", so that saved states stay loadable); a portion missing from the
    rotation has ended."""

    def __init__(self, launch: Callable[[list[int], list], Iterator[tuple[int, Any, State]]], workers: int):
        self.launch = launch
        self.turn: deque[int] = deque(range(workers))
        self.states: list[State | None] = [None] * workers
        self._helpers: Iterator[tuple[int, Any, State]] | None = None

    def __next__(self) -> Any:
        if not self.turn:
            raise StopIteration
        if self._helpers is None:
            self._helpers = self.launch(list(self.turn), list(self.states))
        try:
            portion, item, state = next(self._helpers)
        except StopIteration:
            self.turn.clear()
            raise
        while self.turn[0] != portion:
            self.turn.popleft()  # portions that ended before this one's turn came
        self.states[portion] = state
        self.turn.rotate(-1)
        return item

    def state_dict(self) -> State:
        return {"turn": list(self.turn), "shares": list(self.states)}

    def load_state_dict(self, state: State | None) -> None:
        self._stop()
        workers = len(self.states)
        self.turn = deque(range(workers) if state is None else (int(s) for s in state["turn"]))
        self.states = [None] * workers if state is None else list(state["shares"])
        if len(self.states) != workers:
            raise ValueError(f"state for {len(self.states)} parallel workers given to a stage with {workers}")
