"""`Shuffled`: the one shuffle buffer (Pipeline.shuffle and ShardDataset's shuffle_buffer both use it).

Fill a buffer with `bufsize` samples; then for each new sample yield a buffered one chosen by the rng
and put the new one in its place; at the end yield the rest in a random order. The rng is
`stages.sample_rng(seed, epoch, worker, stage, 0)`, so the order is a pure function of the seed, the
epoch, the portion and the input.

State. The buffer is not saved (it may hold thousands of decoded samples): the state is the upstream's
position where this shuffle started plus the number of samples yielded since. Restoring replays the
input from that start through the same rng and drops what had been yielded, so the remaining
order is exactly the one the interrupted run would have produced; the cost of a restore is reading
the epoch up to the checkpoint again (not decoding it when the shuffle comes before the maps).
"""

from __future__ import annotations

from typing import Any

from tensorcom.pipeline._node import Node, State
from tensorcom.pipeline.stages import RngKey, sample_rng


class Shuffled(Node):
    """Items of `up` in an order randomized through a buffer of `bufsize` (see the module docstring)."""

    def __init__(self, up: Node, bufsize: int, rng_key: RngKey):
        self.up, self.bufsize, self.rng_key = up, bufsize, rng_key
        self._restart(None, 0)

    def _restart(self, start: State | None, yielded: int) -> None:
        self.start, self.yielded = start, 0
        self.buffer: list = []
        self.tail: list[int] | None = None  # the order of the last buffered items, once the input has ended
        self.rng = sample_rng(*self.rng_key, 0)
        for _ in range(yielded):
            next(self)

    def __next__(self) -> Any:
        if self.start is None:
            self.start = self.up.state_dict()
        while self.tail is None:
            try:
                sample = next(self.up)
            except StopIteration:
                self.tail = [int(i) for i in self.rng.permutation(len(self.buffer))][::-1]
                break
            if len(self.buffer) < self.bufsize:
                self.buffer.append(sample)
                continue
            index = int(self.rng.integers(self.bufsize))
            chosen, self.buffer[index] = self.buffer[index], sample
            self.yielded += 1
            return chosen
        if not self.tail:
            raise StopIteration
        self.yielded += 1
        return self.buffer[self.tail.pop()]

    def state_dict(self) -> State:
        start = self.start if self.start is not None else self.up.state_dict()
        return {"start": start, "yielded": self.yielded}

    def load_state_dict(self, state: State | None) -> None:
        self.up.load_state_dict(None if state is None else state["start"])
        self._restart(None if state is None else state["start"], 0 if state is None else int(state["yielded"]))
