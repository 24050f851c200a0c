"""Ray actors that scale themselves (tensorcom.ray's workers="auto"): the options' checks and the
driver's pure core, ActorScaling, which turns one observation a second (the consumers' data wait,
the actors' idle share as their runs report it) into the number of actors for the next epoch, more
or fewer: the decision is tensorcom.pipeline.autoscale.Autoscaler's, stepped and clamped by the
EpochScaling the local serving processes' Scaling is too.
The driver (tensorcom.adapters.ray._driver) owns the actors and acts.

V (the stream's portions) is fixed: `portions`, the resumed state's, else max_workers; from
min_workers to the ceiling, min(max_workers, V, Ray's CPUs / CPUs per actor), actors serve it,
actor i of N the portions v with v % N == i. A change takes effect at the next epoch boundary, so
the batches depend on the seed, the epoch and V only.

Where the errors come from: check_auto (the counts and the URL) before Ray starts, as every other
check of the options and the resume state, for a fixed number of actors too (tensorcom.ray's
start_feeds); actor_ceiling (min_workers actors do not fit) once Ray runs, before any actor or hub:
the only check that needs Ray's CPUs.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from tensorcom.checks import positive
from tensorcom.pipeline.autoscale import EpochScaling
from tensorcom.pipeline.shared_serving import is_sharing

UNDECIDED = 0  # V of a fresh stream without portions or max_workers until Ray's CPUs decide it (auto_actors)


def check_auto(minimum: int | None, maximum: int | None, url: Any,
               portions: int | None) -> tuple[int, int | None]:
    """(min_workers, max_workers) of workers="auto": default 1 and `portions` (None when not given
    either: then Ray's CPUs / CPUs per actor, known once Ray runs); ValueError for a count below 1,
    a minimum above the maximum or above `portions`, or a `url` other than a sharing server's (its
    consumers' data wait is what the actors scale on)."""
    minimum = positive("min_workers", 1 if minimum is None else minimum)
    maximum = positive("max_workers", maximum) if maximum is not None else portions
    if maximum is not None and minimum > maximum:
        raise ValueError(f"workers='auto': min_workers={minimum} is above max_workers={maximum}")
    if portions is not None and minimum > portions:
        raise ValueError(f"workers='auto': min_workers={minimum} is more than the stream's {portions} portions")
    if not is_sharing(url):
        raise ValueError(f"tensorcom.ray workers='auto' needs a sharing URL (zshare://, zsplit://), not {url!r}: "
                         "the driver's hub measures the consumers' data wait, which the actors scale on")
    return minimum, maximum


def actor_ceiling(minimum: int, maximum: int, portions: int, cpus: float, per_actor: float) -> int:
    """The most actors: min(maximum, V, Ray's CPUs / CPUs per actor (no bound when an actor takes
    none)); ValueError when `minimum` is above it."""
    ceiling = min(maximum, portions)
    if per_actor > 0:
        ceiling = min(ceiling, int(cpus // per_actor))
    if minimum > ceiling:
        raise ValueError(f"workers='auto': min_workers={minimum} actors do not fit: the stream has {portions} "
                         f"portions, max_workers={maximum}, Ray has {cpus:g} CPUs for actors of {per_actor:g}")
    return ceiling


class ActorScaling(EpochScaling):
    """The number of actors, `target` (tensorcom.pipeline.autoscale.EpochScaling: due(actors), the
    scaler's step within minimum..ceiling), observed as the driver knows the actors.

    ran(idle, busy, actors): an actor's finished run (ServerActor.run) served by `actors` actors, its
    seconds waiting on the hub and the rest. idle_share(): the share of waiting of the finished runs
    of `target` actors (0 before the first: the scaler then never removes one); what the local
    serving processes' stage records tell their autoscaler (tensorcom.pipeline._supervisor), known
    here as each run ends. observe(data_wait, actors, idle_cpus): the consumers' data wait, the
    actors now and Ray's available CPUs in, with idle_share(); returns True when `target` changed
    (the runs of the new number count from then on)."""

    def __init__(self, scaler: Any, minimum: int, ceiling: int, every: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(scaler, minimum, ceiling, every=every, clock=clock)
        self.seconds = {"idle": 0.0, "busy": 0.0}  # of the finished runs of `target` actors

    def ran(self, idle: float, busy: float, actors: int) -> None:
        if actors == self.target:
            self.seconds["idle"] += idle
            self.seconds["busy"] += busy

    def idle_share(self) -> float:
        total = self.seconds["idle"] + self.seconds["busy"]
        return self.seconds["idle"] / total if total > 0 else 0.0

    def observe(self, data_wait: float, actors: int, idle_cpus: float | None) -> bool:
        return self.decide(data_wait, self.idle_share(), actors, idle_cpus, ask=self._forget_runs)

    def _forget_runs(self) -> None:
        self.seconds = {"idle": 0.0, "busy": 0.0}
