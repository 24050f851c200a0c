"""`Intake`: what every receiving endpoint does with a batch it hands to the caller: statistics, the
sample count, the batch's size, the resume record (tensorcom.transport.resume), then the batch
transforms and converters.

    intake = Intake(decoding, passing, stats)
    batch = intake.accept(message)    # a decoded wire.Message of kind "batch" -> the batch to hand over
    intake.marker(message)            # an end-of-epoch marker: the resume record notes its portion
    intake.pass_ended()               # a pass completed: epoch_number (and the record's passes) + 1
    for batch in intake.one_pass(end.next_batch): ...   # the batches of one pass (Connection.items)
    batch = intake.wait_for(next_batch)   # one call, timed as the loop's data wait (Connection.recv)

Pure: no sockets. Counters: `count` (samples received), `batch_size` (of the last batch),
`epoch_number` (passes completed), `consumed` (the Consumption record). Every batch asked for through
`wait_for` / `one_pass` is timed in `stats.waits` (tensorcom.transport.data_wait): blocked until
it is there, then the caller's step until it asks again.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterator

from tensorcom.batch import batch_size
from tensorcom.transport.batches import transform_with
from tensorcom.transport.options import Decoding, PassOptions
from tensorcom.transport.resume import Consumption
from tensorcom.transport.stats import Statistics

EPOCH_END = object()  # what a receiving end's next_batch() returns when a pass completed


class Intake:
    """Accounts for received batches (module docstring); `passing.batch_count` False counts every batch
    as one sample."""

    def __init__(self, decoding: Decoding, passing: PassOptions, stats: Statistics):
        self.decoding, self.passing, self.stats = decoding, passing, stats
        self.count = 0
        self.batch_size = 1
        self.epoch_number = 0
        self.consumed = Consumption()

    def samples(self, batch: Any) -> int:
        """Samples in `batch` (1 when batch_count is False)."""
        return batch_size(batch) if self.passing.batch_count else 1

    def accept(self, message: Any) -> Any:
        """Account for a batch message; its batch (a tuple made a list), transformed and converted."""
        batch = message.batch
        if isinstance(batch, tuple):
            batch = list(batch)
        self.batch_size = self.samples(batch)
        self.stats.add(message.nbytes, self.batch_size)
        self.count += self.batch_size
        if message.portion is not None:
            self.consumed.batch(message.portion, message.epoch, self.batch_size, message.index)
        batch = transform_with(batch, self.decoding.batch_transforms)
        return transform_with(batch, self.decoding.converters)

    def marker(self, message: Any) -> None:
        """Note an end-of-epoch marker of a served portion in the resume record."""
        if message.portion is not None:
            self.consumed.marker(message.portion, message.epoch)

    def pass_ended(self) -> None:
        """A pass completed: count it, and the resume record counts passes as epoch_number does."""
        self.epoch_number += 1
        self.consumed.passes = self.epoch_number

    def wait_for(self, next_batch: Callable[[], Any]) -> Any:
        """next_batch(), its time counted as the loop's data wait (and the time since the previous
        call returned as its step); what it returns or raises."""
        waits = self.stats.waits
        waits.waiting()
        try:
            return next_batch()
        finally:
            waits.got()

    def one_pass(self, next_batch: Callable[[], Any], report: int | None = None) -> Iterator[Any]:
        """The batches `next_batch()` returns until it returns EPOCH_END, at most `passing.epoch` of
        them, and none once `passing.total` samples (when > 0) were received; a statistics line to
        stderr every `report` samples when > 0 (None: `passing.report`)."""
        report = self.passing.report if report is None else report
        yielded, next_report = 0, report
        while yielded < self.passing.epoch:
            if 0 < self.passing.total <= self.count:
                return
            waits = self.stats.waits  # wait_for, inline: this is every batch's path
            waits.waiting()
            try:
                batch = next_batch()
            finally:
                waits.got()
            if batch is EPOCH_END:
                return
            yielded += 1
            if report > 0 and self.count >= next_report:
                print(f"count {self.count} {self.stats.summary()}", file=sys.stderr)
                next_report += report
            yield batch

    def load_state_dict(self, state: dict) -> None:
        """Continue the resume record of `state`; epoch_number becomes its passes."""
        self.consumed.load_state_dict(state)
        self.epoch_number = self.consumed.passes
