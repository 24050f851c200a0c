"""`Mix`: a source that draws each sample from one of several members (sources or pipelines of any
kind) with given weights, and `Mixed`, its node for one (seed, epoch, worker) portion.

    Mix(members, weights=None, *, seed=None, policy="random", window=1000, on_end="stop")
    Pipeline.mix(members, weights=..., seed=0, ...)     the same, as a Pipeline's source

Which member each sample comes from, and what a member's end does, is decided by the pure core
tensorcom.pipeline.mix (MixPlan, MixCursor); this module only opens the members and takes their items.
Every member is opened on the same portion (worker of num_workers) as the mixture; a Source member
with a seed of its own derived from the mixture's (mix.member_seed), a Pipeline member with its own
seed and stages. Pass p of a resampled member
is that member's epoch `epoch + p` (as an endless repeat() numbers its passes).

State: {"mix": {"names", "cursor": the core's position (choices made, per-member counts, passes,
members dropped)}, "members": each member's own node state (None: not started)}; restoring it gives
exactly the remaining sequence, after any number of save/restore cycles.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from tensorcom.pipeline._chain import build_chain, chain_length
from tensorcom.pipeline._node import Node, State
from tensorcom.pipeline.hf_sources import as_source
from tensorcom.pipeline.mix import Key, MixCursor, MixPlan, checked_weights, member_seed, stop_length
from tensorcom.pipeline.sources import Source
from tensorcom.checks import non_negative


def _is_pipeline(member: Any) -> bool:
    """Whether `member` is a Pipeline (known by its parts: the Pipeline module imports this one)."""
    return hasattr(member, "_subshard") and isinstance(getattr(member, "steps", None), tuple)


def _member(value: Any) -> Any:
    """A Source or Pipeline as given (a ShardDataset as its Pipeline); anything else as Pipeline(value)
    takes it: a Hugging Face dataset as its source (pipeline.hf_sources), an iterable as an IterableSource."""
    inner = value.as_pipeline() if hasattr(value, "as_pipeline") else value
    return inner if _is_pipeline(inner) else as_source(inner)


class Mix(Source):
    """Samples drawn from `members` (a list, or a dict name → member) with probabilities `weights`
    (a list in the members' order or a dict by name; None: equal), each member being a Source, a
    Pipeline (a ShardDataset) or any re-iterable. `seed` (None: the pipeline's) keys the choices and
    the Source members' seeds (mix.member_seed); `policy`, `window` and `on_end` as in tensorcom.pipeline.mix."""

    length_by_epoch = True  # length() takes seed= and epoch= (tensorcom.pipeline._chain passes them)

    def __init__(self, members: Sequence[Any] | Mapping[str, Any], weights: Sequence[float] | Mapping[str, float]
                 | None = None, *, seed: int | None = None, policy: str = "random", window: int = 1000,
                 on_end: str = "stop"):
        if isinstance(members, Mapping):
            self.names = [str(name) for name in members]
            values = list(members.values())
        elif isinstance(members, (str, bytes)) or not hasattr(members, "__iter__"):
            raise TypeError(f"members must be a list or a dict of sources or pipelines, got {members!r:.100}")
        else:
            values = list(members)
            self.names = [str(i) for i in range(len(values))]
        if isinstance(weights, Mapping):
            if set(map(str, weights)) != set(self.names):
                raise ValueError(f"weights name {sorted(map(str, weights))}, the members are {self.names}")
            weights = [{str(k): v for k, v in weights.items()}[name] for name in self.names]
        weights = [1.0] * len(values) if weights is None else checked_weights(weights, len(values))
        self.plan = MixPlan(tuple(weights), policy, window, on_end)
        self.members = [_member(v) for v in values]
        self.seed = None if seed is None else non_negative("seed", seed)

    def _opener(self, seed: int, epoch: int, worker: int, num_workers: int) -> Callable[[int, int], Node]:
        def open_member(index: int, passes: int) -> Node:
            member = self.members[index]
            if _is_pipeline(member):
                sub = member._subshard(worker, num_workers, len(member.steps))
                return build_chain(sub, len(sub.steps), epoch + passes)
            return member.open(seed=member_seed(seed, index), epoch=epoch + passes, worker=worker,
                               num_workers=num_workers)

        return open_member

    def open(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Node:
        seed = seed if self.seed is None else self.seed
        cursor = MixCursor(self.plan, (seed, epoch, worker), self.names)
        return Mixed(self._opener(seed, epoch, worker, num_workers), cursor, self.names)

    def _member_length(self, index: int, worker: int, num_workers: int) -> int | None:
        member = self.members[index]
        if _is_pipeline(member):
            return chain_length(member._subshard(worker, num_workers, len(member.steps)), len(member.steps))
        return member.length(worker, num_workers)

    def length(self, worker: int = 0, num_workers: int = 1, *, seed: int = 0, epoch: int = 0) -> int | None:
        """Samples of this portion: with on_end="drop" the members' lengths added up; with "stop" the
        choices before the first that finds its member empty, which depend on (seed, epoch, worker):
        the pipeline's seed and epoch 0 unless given (pass them for another epoch); with "resample"
        None (endless). None when a member's length is unknown."""
        if self.plan.on_end == "resample":
            return None
        lengths = [self._member_length(i, worker, num_workers) for i in range(len(self.members))]
        if None in lengths:
            return None
        if self.plan.on_end == "drop":
            return sum(lengths)  # type: ignore[arg-type]
        key: Key = (seed if self.seed is None else self.seed, epoch, worker)
        return stop_length(self.plan, key, lengths)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        kinds = ", ".join(f"{n}={type(m).__name__}" for n, m in zip(self.names, self.members))
        plan = self.plan
        return f"Mix({kinds}, weights={list(plan.weights)}, policy={plan.policy!r}, on_end={plan.on_end!r})"


class Mixed(Node):
    """The node of a Mix for one portion and epoch: asks the cursor for a member, takes that member's
    next item (opening it on first use, or its next pass), tells the cursor what happened."""

    def __init__(self, open_member: Callable[[int, int], Node], cursor: MixCursor, names: list[str]):
        self.open_member, self.cursor, self.names = open_member, cursor, names
        self.nodes: list[Node | None] = [None] * len(names)
        self.pending: list[State | None] = [None] * len(names)  # member states to load when opened

    def _node(self, index: int) -> Node:
        node = self.nodes[index]
        if node is None:
            node = self.nodes[index] = self.open_member(index, self.cursor.passes[index])
            node.load_state_dict(self.pending[index])
            self.pending[index] = None
        return node

    def __next__(self) -> Any:
        while True:
            index = self.cursor.member()
            if index is None:
                raise StopIteration
            try:
                item = next(self._node(index))
            except StopIteration:
                self.cursor.ended(index)
                self._close_member(index)  # reopened at its next pass when chosen again (resample)
                continue
            self.cursor.took(index)
            return item

    def counts(self) -> dict[str, int]:
        """Samples taken so far from each member this epoch, by member name."""
        return dict(zip(self.names, self.cursor.counts))

    def state_dict(self) -> State:
        members = [n.state_dict() if n is not None else p for n, p in zip(self.nodes, self.pending)]
        return {"mix": {"names": list(self.names), "cursor": self.cursor.state_dict()}, "members": members}

    def load_state_dict(self, state: State | None) -> None:
        self.close()
        self.cursor.load_state_dict(None if state is None else state["mix"]["cursor"])
        self.pending = [None] * len(self.names) if state is None else list(state["members"])
        if len(self.pending) != len(self.names):
            raise ValueError(f"the state is of a mixture of {len(self.pending)} members, "
                             f"this one has {len(self.names)}")

    def _close_member(self, index: int) -> None:
        node, self.nodes[index] = self.nodes[index], None
        self.pending[index] = None
        if node is not None:
            node.close()

    def close(self) -> None:
        for index in range(len(self.nodes)):
            node, self.nodes[index] = self.nodes[index], None
            if node is not None:
                self.pending[index] = node.state_dict()
                node.close()
