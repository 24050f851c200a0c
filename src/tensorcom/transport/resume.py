"""Resuming a served stream where a consumer stopped: what the consumer has consumed (its side) and
what a restarted server skips (the server's side). Pure: no sockets, no processes.

`tensorcom.serve` tags every message with its `wire.Portion` (stream id, worker i of N) and the epoch
of the pipeline. A receiving `Connection` feeds each delivered batch and each marker to a
`Consumption`, whose `state_dict()` is JSON-ready:

    {"version": 1, "passes": 3,                           # the Connection's completed passes
     "streams": {"serve-1a2b3c": {"workers": 2,            # one entry per served stream
                                  "epoch": 4,              # its first epoch not complete
                                  "shares": [{"epoch": 4, "worker": 0, "batches": 7, "samples": 35,
                                              "ended": false}, ...]}}}    # one per worker's portion

(The key "shares", like the messages' `share` metadata key, keeps its name: saved states stay loadable.)

A server restarted from it (`ResumePlan.from_state`) serves the same stream id with the same number
of workers, from that epoch on, worker i first skipping the `batches` of each (epoch, i) the
consumer recorded. Pipelines are deterministic given (seed, epoch, worker), so what follows is
exactly what the consumer has not seen. Counting is exact on lossless links (PUSH/PULL); batches a
PUB/SUB subscriber lost (`stats.dropped`) are not sent again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

STATE_VERSION = 1


@dataclass
class _Portion:
    """What was consumed of one worker's portion of one epoch (the part of the data that worker
    serves)."""

    batches: int = 0
    samples: int = 0
    ended: bool = False  # its end-of-epoch marker arrived


@dataclass
class _Stream:
    """One served stream: worker count, first incomplete epoch, per (epoch, worker) consumption."""

    workers: int
    epoch: int = 0
    portions: dict[tuple[int, int], _Portion] = field(default_factory=dict)

    def complete_epochs(self) -> None:
        """Drop every finished epoch at the front (all workers ended it); advance `epoch` past them."""
        while all(self.portions.get((self.epoch, w), _Portion()).ended for w in range(self.workers)):
            for w in range(self.workers):
                del self.portions[(self.epoch, w)]
            self.epoch += 1


class Consumption:
    """The consumer's record of what it was handed, per served stream, epoch and worker.

    `batch(portion, epoch, samples)` for each delivered batch with a portion (a wire.Portion),
    `marker(portion, epoch)` for each end-of-epoch marker with one; `state_dict()` /
    `load_state_dict()` (layout: module docstring).
    """

    def __init__(self) -> None:
        self.streams: dict[str, _Stream] = {}
        self.passes = 0

    def _portion(self, portion: Any, epoch: int) -> _Portion:
        stream = self.streams.setdefault(portion.stream, _Stream(portion.workers, epoch))
        if stream.workers != portion.workers:  # the stream was restarted with another worker count
            stream = self.streams[portion.stream] = _Stream(portion.workers, epoch)
        stream.epoch = min(stream.epoch, epoch)
        return stream.portions.setdefault((epoch, portion.worker), _Portion())

    def batch(self, portion: Any, epoch: int, samples: int) -> None:
        """Record a batch of `samples` samples of worker portion.worker's portion of `epoch`."""
        record = self._portion(portion, epoch)
        record.batches += 1
        record.samples += samples

    def marker(self, portion: Any, epoch: int) -> None:
        """Record that worker portion.worker ended `epoch`."""
        self._portion(portion, epoch).ended = True
        self.streams[portion.stream].complete_epochs()

    def state_dict(self) -> dict:
        """The JSON-ready record (module docstring)."""
        streams = {}
        for name, stream in self.streams.items():
            portions = [{"epoch": e, "worker": w, "batches": r.batches, "samples": r.samples, "ended": r.ended}
                        for (e, w), r in sorted(stream.portions.items())]
            streams[name] = {"workers": stream.workers, "epoch": stream.epoch, "shares": portions}
        return {"version": STATE_VERSION, "passes": self.passes, "streams": streams}

    def load_state_dict(self, state: dict) -> None:
        """Replace the record with `state` (from state_dict()); ValueError naming what is malformed."""
        streams = _check_state(state)
        self.passes = _count(state, "passes")
        self.streams = {}
        for name, entry in streams.items():
            stream = self.streams[name] = _Stream(_count(entry, "workers", 1), _count(entry, "epoch"))
            for portion in entry.get("shares", []):
                key = (_count(portion, "epoch"), _count(portion, "worker"))
                stream.portions[key] = _Portion(_count(portion, "batches"), _count(portion, "samples"),
                                                bool(portion.get("ended", False)))


@dataclass(frozen=True)
class ResumePlan:
    """What a restarted server does: serve `stream` with `workers` workers from `epoch` on, worker i
    first skipping skip(e, i) batches of epoch e."""

    stream: str
    workers: int
    epoch: int
    skips: dict[tuple[int, int], int] = field(default_factory=dict)

    def skip(self, epoch: int, worker: int) -> int:
        """Batches the consumer already has of `worker`'s portion of `epoch`."""
        return self.skips.get((epoch, worker), 0)

    @classmethod
    def from_state(cls, state: Any, stream: str | None = None) -> ResumePlan | None:
        """The plan for the consumer state `state` (a dict, or the path of a JSON file holding one);
        `stream` picks one when the state records several. None when it records no stream (the
        consumer has seen nothing: start from the beginning). ValueError for a malformed state."""
        record = Consumption()
        record.load_state_dict(load_state(state))
        if stream is None and len(record.streams) > 1:
            raise ValueError(f"the resume state records {len(record.streams)} served streams "
                             f"{sorted(record.streams)}; name the one to resume")
        if not record.streams:
            return None
        name = stream if stream is not None else next(iter(record.streams))
        if name not in record.streams:
            raise ValueError(f"the resume state has no stream {name!r}; it has {sorted(record.streams)}")
        found = record.streams[name]
        skips = {key: portion.batches for key, portion in found.portions.items()}
        return cls(name, found.workers, found.epoch, skips)


def load_state(state: Any) -> dict:
    """A consumer state: `state` itself when it is a dict, else read from the JSON file it names."""
    if isinstance(state, dict):
        return state
    if not isinstance(state, (str, os.PathLike)):
        raise TypeError(f"a resume state is a dict or the path of a JSON file, not {type(state).__name__}")
    try:
        with open(state, encoding="utf-8") as stream:
            return json.load(stream)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{os.fspath(state)}: not a JSON consumer state: {exc}") from exc


def save_state(state: dict, path: Any) -> None:
    """Write `state` as JSON to `path`, atomically (a temporary file renamed over it)."""
    temporary = f"{os.fspath(path)}.tmp{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as stream:
        json.dump(state, stream, indent=1)
    os.replace(temporary, path)


def _check_state(state: Any) -> dict:
    """The state's streams map; ValueError for another version or shape."""
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise ValueError(f"not a version-{STATE_VERSION} consumer state: {state!r:.200}")
    streams = state.get("streams", {})
    if not isinstance(streams, dict) or not all(isinstance(v, dict) for v in streams.values()):
        raise ValueError(f"consumer state: 'streams' must map stream ids to records, got {streams!r:.200}")
    return streams


def _count(entry: Any, key: str, low: int = 0) -> int:
    """entry[key] as an int >= low (0 when absent and low is 0); ValueError naming the key."""
    value = entry.get(key, 0) if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"consumer state: {key} must be an int >= {low}, got {value!r} in {entry!r:.200}")
    return value
