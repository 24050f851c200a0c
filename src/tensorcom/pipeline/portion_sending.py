"""Sending a serving process's portions of a stream, epoch by epoch (tensorcom.serve's processes and
tensorcom.ray's actors).

    lanes = [Lane(v, pipeline.shard(v, V), connection_of_v) for v in my_portions]
    for batches, samples in send_epochs(lanes, epochs, first_epoch, stop, barrier, plan.taken): ...

Each `Lane` is one portion v of V: its pipeline (worker v of V, so its batches depend on seed, epoch
and v only) and its own Connection. Within an epoch the lanes send round-robin, one batch each in
turn, every batch with its `index` (its position within the portion's epoch); a lane that runs out
sends its end-of-epoch marker. Batches a resumed consumer already has (`taken(epoch, v)`, an
IndexSet) are regenerated and passed over (`untaken`). Pure of processes: the caller owns the
connections and the pipelines and closes them.

With a StageClock (tensorcom.pipeline.stage_times; the lanes' pipelines timed with it) the time in
`conn.send` is counted as the stage "send": encoding the batch (headers only: its arrays go out
zero-copy) and handing it to ZeroMQ, which blocks while the socket's queue is full or the consumers
gave no credit. The Connection does not split the two, and the encoding is small beside the wait,
so the reports count "send" as the process's idle time (waiting on its consumers), every other
stage as busy time. Lanes whose pipeline draws from a Mix add the samples taken from each member
(tensorcom.pipeline.mix.member_counts of their states, read only when a report is due).

Stopping at an epoch boundary (workers that scale themselves, tensorcom.serve's workers="auto"): a
`Gate` shared by the processes and their parent is the barrier's action; the parent `ask()`s, and the
processes all leave at the same boundary, their epochs complete, with `next_epoch` the one to serve next.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from tensorcom.batch import batch_size
from tensorcom.pipeline._mix_source import Mix
from tensorcom.pipeline.mix import member_counts
from tensorcom.pipeline._node import skip
from tensorcom.rates import Throttle
from tensorcom.transport.index_set import IndexSet

PROGRESS_INTERVAL = 0.25  # seconds between a process's progress reports


@dataclass
class Lane:
    """Portion `portion` of the stream: its `source` (a Pipeline, with set_epoch) and its `conn`."""

    portion: int
    source: Any
    conn: Any


def _samples_in(batch: Any) -> int:
    try:
        return batch_size(batch)
    except TypeError:
        return 0


class _Progress:
    """A process's counts, reported at most every PROGRESS_INTERVAL seconds; with a StageClock, its
    stage record too, and the member counts of the lanes that draw from a Mix."""

    def __init__(self, clock: Any = None, lanes: Iterable[Lane] = ()) -> None:
        self.batches = self.samples = 0
        self.due = Throttle(PROGRESS_INTERVAL, start=-math.inf)  # the first batch is reported at once
        self.clock = clock
        self.mixed = [lane for lane in lanes if isinstance(getattr(lane.source, "source", None), Mix)]
        self.members: dict[str, int] = {}  # samples per member in the epochs the lanes have finished

    def add(self, batch: Any) -> bool:
        """Count `batch`; True when a report is due (tensorcom.rates.Throttle)."""
        self.batches, self.samples = self.batches + 1, self.samples + _samples_in(batch)
        return self.due.due()

    def finished(self, lane: Lane) -> None:
        """`lane` has ended its epoch: its member counts join the finished epochs'."""
        if self.clock is not None and any(lane is mixed for mixed in self.mixed):
            _add(self.members, member_counts(lane.source.state_dict()))

    def report(self, running: list[Lane]) -> tuple:
        """(batches, samples); timed: (batches, samples, stage record), with the member counts of the
        mixtures (the finished epochs' and those of the `running` lanes' states) when there are any."""
        if self.clock is None:
            return self.batches, self.samples
        counts: tuple = (self.batches, self.samples, self.clock.record())
        if not self.mixed:
            return counts
        members = dict(self.members)
        for lane in running:
            if any(lane is mixed for mixed in self.mixed):
                _add(members, member_counts(lane.source.state_dict()))
        return (*counts, members)


def _add(totals: dict[str, int], counts: dict[str, int]) -> None:
    for name, count in counts.items():
        totals[name] = totals.get(name, 0) + count


class Gate:
    """Shared by one set of serving processes and their parent (pass it as the processes' barrier's
    action, made before they start): the parent calls `ask()`; the action, which the barrier runs once
    per epoch boundary in one process before any leaves, turns the request into `stopping`, so every
    process stops at that same boundary (send_epochs returns) and none starts the next epoch, which
    `next_epoch` names (-1 before a boundary). Lock-free shared memory: one writer per field."""

    def __init__(self, ctx: Any):
        self.flags = ctx.RawArray("q", [0, 0, -1])  # asked, stopping, the epoch after the last one sent

    def ask(self) -> None:
        self.flags[0] = 1

    @property
    def asked(self) -> bool:
        return bool(self.flags[0])

    @property
    def stopping(self) -> bool:
        return bool(self.flags[1])

    @property
    def next_epoch(self) -> int:
        return self.flags[2]

    def __call__(self) -> None:  # the barrier's action: every process has finished the epoch
        if self.flags[0]:
            self.flags[1] = 1


def send_epochs(lanes: list[Lane], epochs: int | None, first_epoch: int, stop: Any, barrier: Any,
                taken: Callable[[int, int], IndexSet] | None = None, clock: Any = None,
                gate: Gate | None = None) -> Iterator[tuple]:
    """Send each epoch of every lane (module docstring), each lane's batches followed by its marker;
    after an epoch wait at `barrier` for the other processes, so that no process's next epoch
    overtakes another's markers. Yields the counts (batches, samples) sent so far when a report is
    due and after each epoch. `taken(epoch, v)`: the batch indices the consumers already have.
    `clock`: a StageClock that times the sends (module docstring); the counts then carry its record.
    `gate`: the Gate that is `barrier`'s action; when it is stopping after a boundary, return there."""
    progress = _Progress(clock, lanes)
    epoch = first_epoch
    while (epochs is None or epoch < first_epoch + epochs) and not stop.is_set():
        active = []
        for lane in lanes:
            lane.source.set_epoch(epoch)
            lane.conn.epoch_number = epoch
            have = IndexSet() if taken is None else taken(epoch, lane.portion)
            active.append((lane, untaken(iter(lane.source), have, epoch, lane.portion)))
        while active:
            for item in list(active):
                lane, batches = item
                found = next(batches, None)
                if stop.is_set():
                    return
                if found is None:
                    lane.conn.end_epoch()
                    active.remove(item)
                    progress.finished(lane)
                    continue
                start = time.perf_counter() if clock is not None else 0.0
                lane.conn.send(found[1], copy=False, index=found[0])  # the pipeline lets it go: zero-copy
                if clock is not None:
                    clock.add("send", time.perf_counter() - start)
                if progress.add(found[1]):
                    yield progress.report([running for running, _ in active])
        yield progress.report([])  # an epoch's counts reach the report even if the next send blocks
        if gate is not None:
            gate.flags[2] = epoch + 1  # every process writes the same value
        barrier.wait()
        epoch += 1
        if gate is not None and gate.stopping:
            return


def untaken(batches: Iterator[Any], taken: IndexSet, epoch: int, portion: int) -> Iterator[tuple[int, Any]]:
    """(index, batch) for the batches of one epoch of a portion whose index is not in `taken`; those a
    resumed consumer already has are passed over (pipelines are deterministic given seed, epoch and
    portion; a map or batch stage passes over without computing: tensorcom.pipeline._node.skip).
    ValueError when the portion is shorter than the highest taken index (not the pipeline the consumer
    was fed from)."""
    position = 0
    for start, stop in taken.intervals:
        while position < start and (batch := next(batches, _END)) is not _END:
            yield position, batch
            position += 1
        if position == start:
            position += skip(batches, stop - start)
        if position < stop:
            raise ValueError(f"resume: the consumer has batch {taken.high - 1} of epoch {epoch} of portion {portion}, "
                             f"but the portion has only {position} batches; is this the pipeline it was fed from?")
    for position, batch in enumerate(batches, position):
        yield position, batch


_END = object()
