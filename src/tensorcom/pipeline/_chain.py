"""A Pipeline's steps → its chain of nodes for one epoch, and the number of items that chain yields.

    build_chain(pipeline, count, epoch)   the node of the first `count` steps (source first)
    chain_length(pipeline, count)         items out of the first `count` steps, or None when unknown
    PortionMaker                          what a parallel stage's worker runs: one portion's chain

A `repeat` or `parallel` step cuts the chain: the steps before it are built again for each pass
(Repeated) or in each worker (Parallel). Node classes: tensorcom.pipeline.stages, _shuffle, _pooled,
_sliced; sources' nodes come from Source.open.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator

from tensorcom.pipeline._node import Node, State, with_states
from tensorcom.pipeline._pooled import MapPlan, Parallel, Prefetched, Tagged, WorkerMapped
from tensorcom.pipeline._portions import PortionPool, shard_parallel
from tensorcom.pipeline._shuffle import Shuffled
from tensorcom.pipeline._sliced import Sliced, sliced_length
from tensorcom.pipeline.autoscale import Elastic, Tuner, stderr_line
from tensorcom.pipeline.stage_times import stage_names
from tensorcom.pipeline.stages import Batched, FieldSelector, FieldTuple, Filtered, Mapped, Repeated, Unbatched
from tensorcom.pipeline.workers import WorkerPool

CUTS = ("repeat", "parallel")


def build_chain(p: Any, count: int, epoch: int) -> Node:
    """The node chain of `p.steps[:count]` on p's portion (p.worker of p.num_workers) for `epoch`;
    with a StageClock in p._clock (tensorcom.pipeline.stage_times.timed) each node is timed."""
    cuts = [i for i in range(count) if p.steps[i].kind in CUTS]
    if cuts:
        node = (_parallel if p.steps[cuts[-1]].kind == "parallel" else _repeated)(p, cuts[-1], epoch)
        start = cuts[-1] + 1
    else:
        node = p.source.open(seed=p.seed, epoch=epoch, worker=p.worker, num_workers=p.num_workers)
        start = 0
    clock = p.__dict__.get("_clock")
    names = stage_names("read", p.steps) if clock is not None else []
    if clock is not None:
        node = clock.timed(node, names[start])
    for index in range(start, count):
        node = _stage(p, index, node, epoch)
        if clock is not None and p.steps[index].kind != "with_length":
            node = clock.timed(node, names[index + 1])
    return node


def _repeated(p: Any, index: int, epoch: int) -> Node:
    """Passes over steps[:index]: pass k of epoch e runs epoch e × stride + k (stride: the number of
    passes, so that epochs never overlap; 1 for ShardDataset's consecutive epochs), e + k when endless."""
    args = p.steps[index].args
    epochs = args["epochs"]
    first = epoch if epochs is None else epoch * args.get("stride", epochs)
    return Repeated(lambda inner: build_chain(p, index, inner), epochs, first)


def _parallel(p: Any, index: int, epoch: int) -> Node:
    """steps[:index] for `epoch` in the parallel stage's workers, their items round-robin. Processes
    come from a PortionPool kept in p._pools for this step and portion, so they live across epochs
    (threads, or a pool already busy with another iterator: started for this epoch)."""
    args = p.steps[index].args
    upstream = p._copy(steps=p.steps[:index], _pools={}, _clock=None)  # timed as a whole, here
    pool = None
    if args["processes"]:
        key = (p.steps[index], p.worker, p.num_workers)
        if key not in p._pools:
            p._pools[key] = PortionPool(args["workers"], args["buffer"], args["init"])
        pool = p._pools[key]

    def launch(order: list[int], states: list) -> Iterator[tuple[int, Any, State]]:
        make = PortionMaker(upstream, epoch, args["workers"], order, states)
        if pool is not None and not pool.busy:
            return pool.run(make, len(order))
        return shard_parallel(make, workers=len(order), processes=args["processes"], buffer=args["buffer"],
                              init=args["init"])

    return Parallel(launch, args["workers"])


class PortionMaker:
    """Picklable `make(slot, count)` for tensorcom.pipeline._portions: the chain of portion order[slot]
    of `portions` of `pipeline` at `epoch`, from position states[portion], as (portion, item, state) triples."""

    def __init__(self, pipeline: Any, epoch: int, portions: int, order: list[int], states: list):
        self.pipeline, self.epoch, self.portions, self.order, self.states = pipeline, epoch, portions, order, states

    def key(self) -> tuple:
        """What makes two makers the same run (of the same pipeline step: the pool's owner sees to that)."""
        return self.epoch, self.portions, list(self.order), list(self.states)

    def following(self) -> PortionMaker:
        """The maker of the next epoch, every portion from its start."""
        return PortionMaker(self.pipeline, self.epoch + 1, self.portions, list(range(self.portions)),
                            [None] * self.portions)

    def __call__(self, slot: int, count: int) -> Iterator[tuple[int, Any, State]]:
        portion = self.order[slot]
        sub = self.pipeline._subshard(portion, self.portions, len(self.pipeline.steps))
        chain = build_chain(sub, len(sub.steps), self.epoch)
        chain.load_state_dict(self.states[portion])
        return _portion_items(portion, chain)


def _portion_items(portion: int, chain: Node) -> Iterator[tuple[int, Any, State]]:
    try:
        for item, state in with_states(chain):
            yield portion, item, state
    finally:
        chain.close()


def _stage(p: Any, index: int, up: Node, epoch: int) -> Node:
    """The node of step `index` over `up`."""
    step = p.steps[index]
    a = step.args
    key = (p.seed, epoch, p.worker, index)
    if step.kind == "map":
        return _map(p, step, up, key if a["rng"] else None)
    table: dict[str, Callable[[], Node]] = {
        "filter": lambda: Filtered(up, a["predicate"]),
        "select": lambda: Mapped(up, FieldSelector(a["fields"])),
        "to_tuple": lambda: Mapped(up, FieldTuple(a["fields"])),
        "shuffle": lambda: Shuffled(up, a["bufsize"], key),
        "batch": lambda: Batched(up, a["size"], a["partial"], a["collate"]),
        "unbatch": lambda: Unbatched(up),
        "rebatch": lambda: Batched(Unbatched(up), a["size"], a["partial"], a["collate"]),
        "take": lambda: Sliced(up, 0, a["count"]),
        "prefetch": lambda: Prefetched(up, a["size"]),
        "slice": lambda: Sliced(up, a["start"], a["stop"], a["step"]),
        "with_length": lambda: up,
    }
    return table[step.kind]()


def _map(p: Any, step: Any, up: Node, rng_key: tuple | None) -> Node:
    """map(fn): inline, or on threads / processes (a persistent map's pool is kept in p._pools)."""
    a = step.args
    if a["workers"] == 0:
        return Mapped(up, a["fn"], rng_key)
    if Elastic.of(a["workers"]) is not None:
        return _autoscaled(p, step, up, rng_key)
    pool = p._pools.get(step)
    persistent = a["processes"] if a["persistent"] is None else a["persistent"]
    if persistent and pool is None:
        pool = p._pools[step] = WorkerPool(Tagged(a["fn"]), a["workers"], a["processes"])
    plan = MapPlan(a["workers"], a["processes"], a["ordered"], a["buffer"], rng_key, pool)
    return WorkerMapped(up, a["fn"], plan)


def _autoscaled(p: Any, step: Any, up: Node, rng_key: tuple | None) -> Node:
    """map(fn, workers="auto"): on a kept pool of as many workers as it may grow to, of which a
    Tuner lets as many compute as its Autoscaler says, measuring the wait for results and, in a
    timed pipeline (a serving process), the time blocked in "send"."""
    a, elastic = step.args, Elastic.of(step.args["workers"])
    pool = p._pools.get(step)
    if pool is None:
        scaler = elastic.scaler()
        pool = p._pools[step] = WorkerPool(Tagged(a["fn"]), scaler.start(), a["processes"], capacity=scaler.ceiling)
        pool.tuner = Tuner(scaler, elastic.interval, say=stderr_line)
    clock = p.__dict__.get("_clock")
    if clock is not None:
        pool.tuner.sent = lambda: clock.totals.get("send", (0.0, 0))[0]
    plan = MapPlan(pool.capacity, a["processes"], a["ordered"], a["buffer"], rng_key, pool)
    return WorkerMapped(up, a["fn"], plan)


def chain_length(p: Any, count: int) -> int | None:
    """Items out of the first `count` steps of `p` on its portion (None: unknown)."""
    cuts = [i for i in range(count) if p.steps[i].kind == "parallel"]
    if cuts:
        n = p.steps[cuts[-1]].args["workers"]
        sizes = [chain_length(p._subshard(i, n, cuts[-1]), cuts[-1]) for i in range(n)]
        size, start = (None if None in sizes else sum(sizes)), cuts[-1] + 1  # type: ignore[arg-type]
    else:
        size, start = _source_length(p), 0
    for step in p.steps[start:count]:
        size = _step_length(step, size)
    return size


def _source_length(p: Any) -> int | None:
    """The source's length for p's portion; a source whose length depends on the epoch's choices (a
    Mix that ends with its first empty member) says so with `length_by_epoch` and gets seed and epoch."""
    if getattr(p.source, "length_by_epoch", False):
        return p.source.length(p.worker, p.num_workers, seed=p.seed, epoch=p.epoch)
    return p.source.length(p.worker, p.num_workers)


def _step_length(step: Any, size: int | None) -> int | None:
    """Items out of `step` given `size` items in (None: unknown)."""
    if step.kind == "with_length":
        return step.args["count"]
    if step.kind == "slice":
        return sliced_length(size, step.args["start"], step.args["stop"], step.args["step"])
    if size is None or step.kind in ("filter", "unbatch", "rebatch"):
        return None
    if step.kind == "batch":
        rounding = math.ceil if step.args["partial"] else math.floor
        return int(rounding(size / step.args["size"]))
    if step.kind == "repeat":
        return None if step.args["epochs"] is None else size * step.args["epochs"]
    if step.kind == "take":
        return min(size, step.args["count"])
    return size
