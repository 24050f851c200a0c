"""Where a pipeline's time goes: seconds per stage, measured as its chain runs, merged over processes.

    clock = StageClock()                       one per process (perf_counter by default)
    pipeline = timed(pipeline, clock)          a copy whose chains time every stage with `clock`
    node = clock.timed(node, "decode")         a node whose next() adds its own time to "decode"
    clock.add("send", seconds)                 time measured elsewhere (the serving loop's sends)
    record = clock.record()                    {name: [seconds, items]}: plain, for a process's reports
    total = merge([record_0, record_1, ...])   the sum over processes, stage order kept
    stages = summary(total, samples)           {name: {"seconds", "share", "per_sample_ms"}}
    verdict(data_waits, idle_s, busy_s)        one line: who waits for whom

A stage's own time is the time of its next() minus the time its upstream's timed next() took within
it (nested time is counted once, by the stage that spent it), so the shares of one process's stages
add up to 1. The nesting is tracked per thread: a stage whose upstream runs in a helper thread
(prefetch) counts only its wait for that thread, the upstream's stages count their own time there.
Cost: two clock readings per stage per item, and nothing at all when no clock is given.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any, Callable, Iterable

from tensorcom.pipeline._node import Node, State, skip

Record = dict[str, list]  # name -> [seconds, items]

WAITING_SHARE = 0.2  # a consumer waiting this share of its time, or a server idle this share: the bottleneck


class StageClock:
    """Seconds and items per stage name, in the order the stages were first named."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.totals: Record = {}
        self._nested = threading.local()  # .inner: timed seconds spent below the running next()

    def timed(self, node: Any, name: str) -> Timed:
        """`node`, its next() timed as stage `name` (its own time: upstream stages' time excluded)."""
        self.totals.setdefault(name, [0.0, 0])
        return Timed(node, name, self)

    def add(self, name: str, seconds: float, items: int = 1) -> None:
        """Count `seconds` and `items` to stage `name`."""
        entry = self.totals.setdefault(name, [0.0, 0])
        entry[0] += seconds
        entry[1] += items

    def record(self) -> Record:
        """A copy of the totals: {name: [seconds, items]}."""
        return {name: list(entry) for name, entry in self.totals.items()}


class Timed(Node):
    """A node whose next() is the wrapped node's, timed by a StageClock; pass_over, state and close
    pass through."""

    def __init__(self, node: Any, name: str, clock: StageClock):
        self.node, self.name, self.clock = node, name, clock
        self.entry = clock.totals[name]

    def __next__(self) -> Any:
        nested = self.clock._nested
        outer = getattr(nested, "inner", 0.0)
        nested.inner = 0.0
        now = self.clock.clock
        start = now()
        try:
            item = next(self.node)
        finally:
            spent = now() - start
            self.entry[0] += spent - nested.inner
            nested.inner = outer + spent
        self.entry[1] += 1
        return item

    def pass_over(self, count: int) -> int:
        """Skip `count` items as the wrapped node would (tensorcom.pipeline._node.skip: without computing
        them where it can); untimed."""
        return skip(self.node, count)

    def state_dict(self) -> State:
        return self.node.state_dict()

    def load_state_dict(self, state: State | None) -> None:
        self.node.load_state_dict(state)

    def close(self) -> None:
        self.node.close()


def timed(pipeline: Any, clock: StageClock) -> Any:
    """A copy of `pipeline` (a Pipeline) whose chains time each node with `clock` (names: stage_names).
    A parallel stage's workers are not timed: the stage is timed as a whole where it is consumed, as
    is a map on threads or processes. The copy stays in this process (a clock does not pickle)."""
    return pipeline._copy(_clock=clock)


def stage_names(source: str, steps: Iterable[Any]) -> list[str]:
    """The stage names of a chain: `source` for the source, then one per step: a map's function's
    name (a partial's function's; a callable object's class name), otherwise the step's kind
    ("batch", "filter", ...); a name used again gets "#2", "#3"."""
    names, seen = [source], {source: 1}
    for step in steps:
        name = step.kind
        if step.kind == "map":
            fn = step.args["fn"]
            while isinstance(fn, functools.partial):
                fn = fn.func
            name = getattr(fn, "__name__", None) or type(fn).__name__
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return names


def merge(records: Iterable[Record | None]) -> Record:
    """The sum of several processes' records (None: a process with no record yet), stage by stage,
    in the order the stages first appear."""
    total: Record = {}
    for record in records:
        for name, (seconds, items) in (record or {}).items():
            entry = total.setdefault(name, [0.0, 0])
            entry[0] += seconds
            entry[1] += items
    return total


def summary(record: Record, samples: int) -> dict[str, dict[str, float]]:
    """{name: {"seconds", "share" (of all stages' seconds), "per_sample_ms" (seconds per sample sent)}}."""
    whole = sum(seconds for seconds, _ in record.values())
    return {name: {"seconds": seconds, "share": seconds / whole if whole > 0 else 0.0,
                   "per_sample_ms": 1000.0 * seconds / samples if samples else 0.0}
            for name, (seconds, _) in record.items()}


def top_stage(stages: dict[str, dict[str, float]], leave_out: tuple[str, ...] = ("send",)) -> str:
    """"decode 61%": the stage with the largest share, except `leave_out`; "" when there is none."""
    shares = {name: s["share"] for name, s in stages.items() if name not in leave_out and s["seconds"] > 0}
    if not shares:
        return ""
    name = max(shares, key=shares.__getitem__)
    return f"{name} {shares[name]:.0%}"


def verdict(data_waits: Iterable[float | None], idle_s: float, busy_s: float,
            threshold: float = WAITING_SHARE) -> str:
    """Who waits for whom. `data_waits`: the consumers' shares of time blocked waiting for a batch
    (None: unknown); `idle_s` / `busy_s`: the serving processes' seconds blocked sending (waiting for
    credit or queue room) / computing. The largest known data wait at or above `threshold` says
    "consumers waiting on data (38%): add workers"; else servers idle at least `threshold` of their
    time say "server waiting on consumers: it keeps up"; else "balanced"."""
    known = [w for w in data_waits if w is not None]
    if known and max(known) >= threshold:
        return f"consumers waiting on data ({max(known):.0%}): add workers"
    if idle_s + busy_s > 0 and idle_s / (idle_s + busy_s) >= threshold:
        return "server waiting on consumers: it keeps up"
    return "balanced"
