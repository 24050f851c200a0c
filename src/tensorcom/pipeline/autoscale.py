"""Workers that scale themselves: a pure core that says +1, -1 or 0 from what a server measures.

    scaler = Autoscaler(minimum=1, maximum=8)          cores: the CPUs this process may use unless given
    idle = MachineIdle()                               idle cores from /proc/stat between two calls
    step = scaler.observe(now, data_wait, idle_share, workers, idle.sample())
    pool.resize(workers + step)                        the caller acts; the core owns no process
    Pipeline.map(fn, workers=Elastic(1, 8)) / "auto"   a map whose pool a Tuner resizes as it runs
    EpochScaling(scaler, minimum, ceiling)             a pool resized only at an epoch boundary: serve's
                                                       processes (_supervisor.Scaling), tensorcom.ray's
                                                       actors (adapters/ray/_scaling.ActorScaling)

Events in, one per observation (the serving process makes one a second):
- `data_wait`: the share of time the consumers wait for data (their recent fraction; when no consumer
  reports, the serving loop's own share of time waiting for the workers' results), 0..1;
- `idle_share`: the serving process's share of time blocked on send, i.e. waiting for consumers' credit;
- `workers`: the pool's size now; `machine_idle_cores`: idle cores of the machine, None when unknown.

Action out: +1 when data wait stayed above `threshold` for a whole `window` and the machine has an idle
core (never past `cores` nor `maximum`); -1 when for a whole window the consumers did not wait (data
wait under half the threshold) and the server sat idle a share large enough that one worker fewer
still keeps up (idle share >= 1/workers, and >= `idle_threshold`); 0 otherwise. After a change it
waits `cooldown` seconds and a fresh window, so every decision sees the new pool's measurements. The
two rules leave a band between them (a pool that just keeps up stays), which is what lets it settle.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tensorcom.checks import non_negative, positive
from tensorcom.rates import Throttle

IDLE_CORE = 0.75  # idle cores (averaged over a second) that count as "an idle core"


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity where the OS tells it, else os.cpu_count())."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Autoscaler:
    """Decides, from a stream of observations, when a worker pool should grow or shrink by one."""

    def __init__(self, minimum: int = 1, maximum: Optional[int] = None, cores: Optional[int] = None,
                 threshold: float = 0.1, window: float = 3.0, cooldown: float = 3.0,
                 idle_threshold: float = 0.2):
        self.cores = positive("cores", cores if cores is not None else usable_cores())
        self.minimum = non_negative("minimum", minimum)
        self.maximum = positive("maximum", maximum if maximum is not None else self.cores)
        if self.minimum > self.maximum:
            raise ValueError(f"minimum {minimum} is above maximum {self.maximum}")
        if not 0 < threshold < 1:
            raise ValueError(f"threshold must lie in (0, 1), got {threshold!r}")
        if window < 0 or cooldown < 0:
            raise ValueError(f"window and cooldown must be >= 0, got {window!r}, {cooldown!r}")
        self.threshold, self.window, self.cooldown = threshold, window, cooldown
        self.idle_threshold = idle_threshold
        self.ceiling = min(self.maximum, self.cores)
        self._seen: collections.deque = collections.deque()  # (now, data_wait, idle_share, idle_cores)
        self._changed_at: Optional[float] = None

    def start(self) -> int:
        """The pool size to start with: the minimum (at least one worker when the ceiling allows)."""
        return max(self.minimum, min(1, self.ceiling))

    def observe(self, now: float, data_wait: float, idle_share: float, workers: int,
                machine_idle_cores: Optional[float] = None) -> int:
        """One observation in, the step out: +1, -1 or 0 workers."""
        if workers < self.minimum:
            return self._change(now, +1)
        if workers > self.ceiling:
            return self._change(now, -1)
        if self._changed_at is not None and now - self._changed_at < self.cooldown:
            return 0
        self._seen.append((now, data_wait, idle_share, machine_idle_cores))
        while len(self._seen) > 1 and now - self._seen[1][0] >= self.window:
            self._seen.popleft()
        if now - self._seen[0][0] < self.window:
            return 0
        seen = list(self._seen)
        if workers < self.ceiling and all(w > self.threshold for _, w, _, _ in seen):
            idle = [c for _, _, _, c in seen[-2:] if c is not None]
            if not idle or min(idle) >= IDLE_CORE:
                return self._change(now, +1)
        least_idle = max(self.idle_threshold, 1.0 / max(workers, 1))
        if workers > self.minimum and all(w < self.threshold / 2 and s >= least_idle
                                          for _, w, s, _ in seen):
            return self._change(now, -1)
        return 0

    def _change(self, now: float, step: int) -> int:
        self._seen.clear()
        self._changed_at = now
        return step


def parse_stat(text: str) -> tuple[float, float]:
    """The first line of /proc/stat ("cpu  user nice system idle iowait irq softirq steal ...") ->
    (idle ticks, total ticks) over all cores; guest time is inside user time and is not added again."""
    fields = text.split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu" or len(fields) < 5:
        raise ValueError(f"not a /proc/stat cpu line: {text[:80]!r}")
    ticks = [float(x) for x in fields[1:9]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0.0)
    return idle, sum(ticks)


def idle_cores(before: tuple[float, float], after: tuple[float, float], cores: int) -> Optional[float]:
    """Idle cores between two parse_stat() readings (0..cores); None when no tick passed."""
    total = after[1] - before[1]
    if total <= 0:
        return None
    return cores * max(0.0, min(1.0, (after[0] - before[0]) / total))


def _read_stat(path: str) -> str:
    with open(path) as stream:
        return stream.readline()


class MachineIdle:
    """Idle cores of the machine since the previous sample(), read from /proc/stat.

    sample() returns None ("unknown": the autoscaler then allows up to its cores) on the first call,
    when the file cannot be read (not Linux), or when no tick passed."""

    def __init__(self, path: str = "/proc/stat", cores: Optional[int] = None,
                 read: Callable[[str], str] = _read_stat):
        self.path, self.read = path, read
        self.cores = cores or os.cpu_count() or 1  # /proc/stat counts every core of the machine
        self._last: Optional[tuple[float, float]] = None

    def sample(self) -> Optional[float]:
        try:
            now = parse_stat(self.read(self.path))
        except (OSError, ValueError):
            return None
        before, self._last = self._last, now
        return None if before is None else idle_cores(before, now, self.cores)


@dataclass(frozen=True)
class Elastic:
    """How many workers an autoscaled map may run (`workers="auto"` is Elastic()): from `minimum` to
    `maximum` (None: the usable cores), decided by an Autoscaler with these settings every `interval`
    seconds. Picklable: it travels with the pipeline to serving processes."""

    minimum: int = 1
    maximum: Optional[int] = None
    threshold: float = 0.1
    window: float = 3.0
    cooldown: float = 3.0
    interval: float = 1.0

    @staticmethod
    def of(workers: Any) -> Optional["Elastic"]:
        """Elastic() for "auto", `workers` itself when it is an Elastic, None for a fixed count;
        ValueError for any other string."""
        if isinstance(workers, Elastic):
            return workers
        if isinstance(workers, str):
            if workers != "auto":
                raise ValueError(f"workers must be a count or 'auto', got {workers!r}")
            return Elastic()
        return None

    def scaler(self) -> Autoscaler:
        return Autoscaler(self.minimum, self.maximum, threshold=self.threshold, window=self.window,
                          cooldown=self.cooldown)


class Tuner:
    """Runs `scaler` on a worker pool's measurements, at most once per `interval` seconds.

    Called as tuner(pool, waited) by the pool's map after each result (tensorcom.pipeline.workers),
    `waited` being the pool's total seconds its consumer spent waiting for results: data wait is the
    share of wall time spent so since the last observation; idle share the share spent in `sent()`
    (total seconds blocked sending, e.g. a StageClock's "send"; 0 without one: the pool then only
    grows while its consumer waits). It resizes the pool by the scaler's step and, with `say`, tells
    each change ("map workers 3 (auto)")."""

    def __init__(self, scaler: Autoscaler, interval: float = 1.0, sent: Optional[Callable[[], float]] = None,
                 machine: Optional[MachineIdle] = None, now: Callable[[], float] = time.monotonic,
                 say: Optional[Callable[[str], None]] = None):
        self.scaler, self.interval, self.now = scaler, interval, now
        self.sent = sent or (lambda: 0.0)
        self.machine = machine if machine is not None else MachineIdle()
        self.say = say
        self._last: Optional[tuple[float, float, float]] = None

    def __call__(self, pool: Any, waited: float) -> None:
        now = self.now()
        if self._last is not None and now - self._last[0] < self.interval:
            return
        last, self._last = self._last, (now, waited, self.sent())
        idle_cores = self.machine.sample()
        if last is None or now <= last[0]:
            return
        span = now - last[0]
        wait, idle = (waited - last[1]) / span, (self._last[2] - last[2]) / span
        step = self.scaler.observe(now, wait, idle, pool.size, idle_cores)
        if step:
            pool.resize(pool.size + step)
            if self.say is not None:
                self.say(f"map workers {pool.size} (auto)")


class EpochScaling:
    """The size of a pool that changes only at an epoch boundary (serve's processes, tensorcom.ray's
    actors): `target`, from `minimum` to `ceiling`, starting at `minimum`, moved by
    `scaler` (an Autoscaler, or any object with its observe(); decided(target) is called after each
    change when it has one). The caller owns the pool and how it measures idle shares.

    due(workers): whether an observation is wanted: at most every `every` seconds (the first at once,
    or `every` seconds from now with at_once=False), never while `workers` (the pool now) differs from
    `target` (a change waits for the boundary). decide(data_wait, idle_share, workers, idle_cores, ask):
    one observation (Autoscaler.observe's) in; `target` moves by the scaler's step, clamped; when it
    changed, ask() (the caller's request for the boundary) is called, then the scaler's decided(target),
    and it returns True."""

    def __init__(self, scaler: Any, minimum: int, ceiling: int, every: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, at_once: bool = True):
        self.scaler, self.minimum, self.ceiling, self.clock = scaler, minimum, ceiling, clock
        self.target = minimum
        self.throttle = Throttle(every, clock, start=float("-inf") if at_once else clock())

    def due(self, workers: int) -> bool:
        return workers == self.target and self.throttle.due()

    def decide(self, data_wait: float, idle_share: float, workers: int, idle_cores: Optional[float],
               ask: Optional[Callable[[], None]] = None) -> bool:
        step = self.scaler.observe(self.clock(), data_wait, idle_share, workers, idle_cores)
        target = max(self.minimum, min(self.ceiling, workers + step))
        if target == self.target:
            return False
        self.target = target
        if ask is not None:
            ask()
        decided = getattr(self.scaler, "decided", None)
        if decided is not None:
            decided(target)
        return True


def consumer_waits(hub: Any) -> list[Optional[float]]:
    """Each consumer's data wait (a share of its time; None when it has not said) as a sharing server
    `hub` (tensorcom.transport.sharing.Hub) knows it; [] without one (None)."""
    return [_wait_share(c.get("data_wait")) for c in ([] if hub is None else hub.server.status)]


def data_wait(hub: Any, otherwise: float) -> float:
    """The data wait a scaler sees: the largest of consumer_waits(hub), `otherwise` when none is known."""
    return max((w for w in consumer_waits(hub) if w is not None), default=otherwise)


def _wait_share(value: Any) -> Optional[float]:
    """A consumer's data wait as a share of its time: a number, or a stats dict's "share"/"fraction"."""
    if isinstance(value, dict):
        value = value.get("share", value.get("fraction"))
    return value if isinstance(value, (int, float)) else None


def stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
