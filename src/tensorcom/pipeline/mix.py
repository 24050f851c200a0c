"""The pure core of weighted mixtures: which member each sample of a mixture comes from, and what
happens when a member runs out. No nodes, no data: choices are numbers, events go in, actions come out.

    plan = MixPlan(weights=(0.7, 0.3), policy="exact", window=1000, on_end="drop")
    cursor = MixCursor(plan, key=(seed, epoch, worker))
    m = cursor.member()          the member of the next sample (None: the mixture has ended)
    cursor.took(m)               that member gave a sample
    cursor.choices(block)        the members of a whole block of choices (what member() reads from)
    cursor.ended(m)              it had none left: "stop", "reopen" (start its next pass) or "drop"
    cursor.state_dict() / load_state_dict(state)    the position: plain dicts, lists and numbers
    stop_length(plan, key, lengths)     samples a mixture with on_end="stop" yields (members of these sizes)
    member_seed(seed, index)            the seed a Source member is opened with (its own shuffles)
    member_counts(state)                per-member sample counts summed over every mixture state inside
                                        any state (a Pipeline's, a StatefulDataLoader's)

Policies. "random": the k-th choice draws member i with probability weights[i] / sum(weights of the
members still in), from a uniform that is a pure function of (seed, epoch, worker, k) (drawn in
blocks of BLOCK), so restoring needs only k. "exact": the choices come in windows of `window`
samples holding round(window × weight) of each member (largest remainder: the counts add up to
`window`), shuffled by a generator keyed by (seed, epoch, worker, window): 70/30 is 70/30 in every
window.

Ends (`on_end`): "stop" ends the mixture when the chosen member has no sample left; "resample" starts
that member's next pass (the mixture never ends: bound it with take() or with_epoch()); "drop" takes
the member out and renormalises the weights of the others (the mixture ends with its last member).
After a drop, "exact" starts a fresh window at that sample, with the renormalised counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tensorcom.checks import choice, positive

POLICIES = ("random", "exact")
ENDINGS = ("stop", "resample", "drop")
BLOCK = 1024  # uniforms drawn at once by the "random" policy
_SALT = 0x313C  # keeps the mixture's generators and member seeds apart from other keys of the same seed

Key = tuple[int, int, int]  # (seed, epoch, worker)


def checked_weights(weights: Sequence[Any], count: int) -> tuple[float, ...]:
    """`weights` as floats when there is one per member, each finite and > 0; else ValueError naming them."""
    values = tuple(weights)
    if len(values) != count:
        raise ValueError(f"give one weight per member: {count} members, {len(values)} weights {values!r}")
    for w in values:
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)) \
                or not math.isfinite(w) or w <= 0:
            raise ValueError(f"weights must be finite numbers > 0, got {w!r} in {values!r}")
    return tuple(float(w) for w in values)


@dataclass(frozen=True)
class MixPlan:
    """What a mixture is: member weights (> 0), policy ("random" | "exact"), window (for "exact")
    and on_end ("stop" | "resample" | "drop"). ValueError for anything else."""

    weights: tuple[float, ...]
    policy: str = "random"
    window: int = 1000
    on_end: str = "stop"

    def __post_init__(self) -> None:
        if not self.weights:
            raise ValueError("a mixture needs at least one member")
        object.__setattr__(self, "weights", checked_weights(self.weights, len(self.weights)))
        choice("policy", self.policy, POLICIES)
        choice("on_end", self.on_end, ENDINGS)
        positive("window", self.window)
        if self.policy == "exact" and self.window < len(self.weights):
            raise ValueError(f"window {self.window} is smaller than the {len(self.weights)} members: "
                             "every member needs a place in each window")


def window_counts(weights: Sequence[float], window: int) -> list[int]:
    """How many of each member a window of `window` choices holds: window × weight / sum, rounded by
    largest remainder (ties to the lower index), so the counts add up to `window`."""
    quotas = np.asarray(weights, dtype=float) * window / float(np.sum(weights))
    counts = np.floor(quotas).astype(int)
    remainders = quotas - counts
    for i in sorted(range(len(counts)), key=lambda j: (-remainders[j], j))[: window - int(counts.sum())]:
        counts[i] += 1
    return counts.tolist()


def _generator(key: Key, *salt: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([*key, _SALT, *salt])))


def window_order(members: Sequence[int], weights: Sequence[float], window: int, key: Key, segment: int,
                 index: int) -> np.ndarray:
    """The choices of window `index` of the segment that started at sample `segment`, over these
    members with these weights: window_counts of each, shuffled by a generator of (key, segment, index)."""
    order = np.repeat(np.asarray(members, dtype=np.int64), window_counts(weights, window))
    _generator(key, 1, segment, index).shuffle(order)
    return order


def uniforms(key: Key, block: int) -> np.ndarray:
    """The uniforms of choices block × BLOCK ... (block + 1) × BLOCK - 1 (a pure function of key and block)."""
    return _generator(key, 0, block).random(BLOCK)


def weighted_pick(members: Sequence[int], weights: Sequence[float], u: np.ndarray) -> np.ndarray:
    """The member each uniform in [0, 1) falls on when `weights` split [0, 1) in the order of `members`."""
    edges = np.cumsum(np.asarray(weights, dtype=float))
    picks = np.searchsorted(edges / edges[-1], u, side="right")
    return np.asarray(members, dtype=np.int64)[np.minimum(picks, len(members) - 1)]


class MixCursor:
    """The position of one mixture epoch (plan and key fixed): choices made, per-member counts,
    passes of resampled members, members dropped, whether it has ended. `names` label the members
    in messages (default "0", "1", ...)."""

    def __init__(self, plan: MixPlan, key: Key, names: Sequence[str] | None = None):
        self.plan, self.key = plan, tuple(int(k) for k in key)
        self.names = list(names) if names is not None else [str(i) for i in range(len(plan.weights))]
        self._cache: tuple[Any, np.ndarray] | None = None
        self.load_state_dict(None)

    def member(self) -> int | None:
        """The member the next sample comes from, or None when the mixture has ended."""
        if self.stopped:
            return None
        if self.plan.policy == "random":
            block, offset = divmod(self.position, BLOCK)
            cache_key: tuple = (block, *self.active)
        else:
            block, offset = divmod(self.position - self.segment, self.plan.window)
            cache_key = (block, self.segment, *self.active)
        if self._cache is None or self._cache[0] != cache_key:
            self._cache = (cache_key, self.choices(block))
        return int(self._cache[1][offset])

    def choices(self, block: int) -> np.ndarray:
        """The members chosen in `block` (BLOCK choices for "random", a window of the current segment
        for "exact") among the members still in, their weights renormalised."""
        members = [i for i, alive in enumerate(self.active) if alive]
        weights = [self.plan.weights[i] for i in members]
        if self.plan.policy == "random":
            return weighted_pick(members, weights, uniforms(self.key, block))
        return window_order(members, weights, self.plan.window, self.key, self.segment, block)

    def took(self, member: int) -> None:
        """Member `member` gave the sample of this position."""
        self.position += 1
        self.counts[member] += 1

    def ended(self, member: int) -> str:
        """Member `member` had no sample at this position: apply on_end and return what the caller does:
        "stop" (the mixture has ended), "reopen" (open the member's next pass) or "drop". ValueError
        when a resampled member's pass was empty (resampling it would never give a sample)."""
        rule = self.plan.on_end
        if rule == "resample":
            if self.counts[member] == self.pass_start[member]:
                raise ValueError(f"mixture member {self.names[member]!r} has no samples in pass {self.passes[member]} "
                                 "(of this worker's portion): it cannot be resampled")
            self.passes[member] += 1
            self.pass_start[member] = self.counts[member]
            return "reopen"
        if rule == "drop":
            self.active[member] = False
            self.segment = self.position
            self.stopped = not any(self.active)
            return "drop"
        self.stopped = True
        return "stop"

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "segment": self.segment, "counts": list(self.counts),
                "passes": list(self.passes), "pass_start": list(self.pass_start),
                "active": list(self.active), "stopped": self.stopped}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Go to `state` (None: the start of the epoch); ValueError for a state of another member count."""
        n = len(self.plan.weights)
        if state is None:
            state = {"position": 0, "segment": 0, "counts": [0] * n, "passes": [0] * n, "pass_start": [0] * n,
                     "active": [True] * n, "stopped": False}
        if len(state["counts"]) != n:
            raise ValueError(f"the state is of a mixture of {len(state['counts'])} members, this one has {n}")
        self.position, self.segment = int(state["position"]), int(state["segment"])
        self.counts = [int(c) for c in state["counts"]]
        self.passes = [int(p) for p in state["passes"]]
        self.pass_start = [int(p) for p in state["pass_start"]]
        self.active = [bool(a) for a in state["active"]]
        self.stopped = bool(state["stopped"])


def stop_length(plan: MixPlan, key: Key, lengths: Sequence[int]) -> int:
    """Samples a mixture with on_end="stop" yields when member i has lengths[i] samples: the choices
    up to the first that finds its member empty (computed from the choices alone, block by block)."""
    members = np.arange(len(plan.weights))
    taken = np.zeros(len(members), dtype=np.int64)
    limits = np.asarray(lengths, dtype=np.int64)
    cursor, start, block = MixCursor(plan, key), 0, 0
    while True:
        picks = cursor.choices(block)  # no member dropped: the choices of an uninterrupted epoch
        onehot = picks[:, None] == members[None, :]
        running = taken[None, :] + np.cumsum(onehot, axis=0)
        over = np.nonzero((running > limits[None, :]).any(axis=1))[0]
        if over.size:
            return start + int(over[0])
        taken, start, block = running[-1], start + len(picks), block + 1


def member_seed(seed: int, index: int) -> int:
    """The seed of member `index` of a mixture of seed `seed`: a pure function of both, so that two
    members never share a shuffle (two lists of one size would otherwise be permuted alike)."""
    return int(np.random.SeedSequence([seed, index, _SALT]).generate_state(1)[0])


def member_counts(state: Any) -> dict[str, int]:
    """Samples taken from each mixture member ({name: count}), summed over every mixture state found
    anywhere inside `state` (a Pipeline's state, a StatefulDataLoader's with one per worker, ...)."""
    totals: dict[str, int] = {}
    todo = [state]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            mix = item.get("mix")
            if isinstance(mix, dict) and "names" in mix and "cursor" in mix:
                for name, count in zip(mix["names"], mix["cursor"]["counts"]):
                    totals[name] = totals.get(name, 0) + int(count)
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return totals
