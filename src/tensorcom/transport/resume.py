"""Resuming a served stream where a consumer stopped: what the consumer has consumed (its side) and
what a restarted server skips (the server's side). Pure: no sockets, no processes.

`tensorcom.serve` splits a stream into V portions (`wire.Portion(stream, v, V)`, V fixed for the
stream's life, whatever the number of serving processes) and tags every batch with its portion, the
epoch of the pipeline and its `index`, its 0-based position within (epoch, portion). A receiving
`Connection` feeds each delivered batch and each marker to a `Consumption`, whose `state_dict()` is
JSON-ready (version 2):

    {"version": 2, "passes": 3,                            # the Connection's completed passes
     "streams": {"serve-1a2b3c": {"workers": 4,            # V, the stream's number of portions
                                  "epoch": 4,              # its first epoch not complete
                                  "shares": [{"epoch": 4, "worker": 0, "batches": 7, "samples": 35,
                                              "ended": false, "taken": [[0, 5], [6, 8]]}, ...]}}}

one share per (epoch, portion v) seen; `taken` the sorted, disjoint, half-open intervals of the batch
indices handed over (`batches` their count). A batch with a portion but no index counts as the one
after the highest taken. A version-1 state (no `taken`) loads with taken [[0, batches]]. (The keys
"shares" and "worker", like the messages' `share` metadata key, keep their names.)

`merge_states([...])` unites the records of several consumers of one job (the ranks of a zsplit job):
taken united, samples summed, ended if any ended, passes the least. A server restarted from a record
(`ResumePlan.from_state`) serves the same stream id with the same V portions, from that epoch on,
regenerating each portion's batches and passing over those in `plan.taken(epoch, v)`. Pipelines are
deterministic given (seed, epoch, v), so what it sends is exactly what the consumers have not seen,
whatever the number of serving processes. Counting is exact on lossless links (PUSH/PULL); batches a
PUB/SUB subscriber lost (`stats.dropped`) are not sent again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from tensorcom.transport.index_set import IndexSet

STATE_VERSION = 2


@dataclass
class _Portion:
    """What was consumed of one portion of one epoch: the batch indices taken, their samples, and
    whether its end-of-epoch marker arrived."""

    taken: IndexSet = field(default_factory=IndexSet)
    samples: int = 0
    ended: bool = False

    def merged(self, other: _Portion) -> _Portion:
        """The union of two consumers' records of the same portion."""
        return _Portion(self.taken | other.taken, self.samples + other.samples, self.ended or other.ended)


@dataclass
class _Stream:
    """One served stream: portion count V, first incomplete epoch, per (epoch, v) consumption."""

    workers: int
    epoch: int = 0
    portions: dict[tuple[int, int], _Portion] = field(default_factory=dict)

    def complete_epochs(self) -> None:
        """Drop every finished epoch at the front (all portions ended); advance `epoch` past them."""
        while all(self.portions.get((self.epoch, v), _Portion()).ended for v in range(self.workers)):
            for v in range(self.workers):
                del self.portions[(self.epoch, v)]
            self.epoch += 1

    def entry(self) -> dict:
        """The JSON-ready record of the stream (module docstring)."""
        shares = [{"epoch": e, "worker": v, "batches": len(r.taken), "samples": r.samples, "ended": r.ended,
                   "taken": r.taken.intervals} for (e, v), r in sorted(self.portions.items())]
        return {"workers": self.workers, "epoch": self.epoch, "shares": shares}


class Consumption:
    """The consumer's record of what it was handed, per served stream, epoch and portion.

    `batch(portion, epoch, samples, index)` for each delivered batch with a portion (a wire.Portion),
    `marker(portion, epoch)` for each end-of-epoch marker with one; `state_dict()` /
    `load_state_dict()` (layout: module docstring; a version-1 state loads too).
    """

    def __init__(self) -> None:
        self.streams: dict[str, _Stream] = {}
        self.passes = 0

    def _portion(self, portion: Any, epoch: int) -> _Portion:
        stream = self.streams.setdefault(portion.stream, _Stream(portion.workers, epoch))
        if stream.workers != portion.workers:  # another stream under the same id: start over
            stream = self.streams[portion.stream] = _Stream(portion.workers, epoch)
        stream.epoch = min(stream.epoch, epoch)
        return stream.portions.setdefault((epoch, portion.worker), _Portion())

    def batch(self, portion: Any, epoch: int, samples: int, index: int | None = None) -> None:
        """Record batch `index` (None: the one after the highest recorded) of `samples` samples of
        portion.worker's portion of `epoch`."""
        record = self._portion(portion, epoch)
        record.taken.add(record.taken.high if index is None else index)
        record.samples += samples

    def marker(self, portion: Any, epoch: int) -> None:
        """Record that portion portion.worker ended `epoch`."""
        self._portion(portion, epoch).ended = True
        self.streams[portion.stream].complete_epochs()

    def state_dict(self) -> dict:
        """The JSON-ready record (module docstring)."""
        streams = {name: stream.entry() for name, stream in self.streams.items()}
        return {"version": STATE_VERSION, "passes": self.passes, "streams": streams}

    def load_state_dict(self, state: dict) -> None:
        """Replace the record with `state` (from state_dict(), version 1 or 2); ValueError naming what
        is malformed."""
        streams = _check_state(state)
        self.passes = _count(state, "passes")
        self.streams = {}
        for name, entry in streams.items():
            stream = self.streams[name] = _Stream(_count(entry, "workers", 1), _count(entry, "epoch"))
            for portion in entry.get("shares", []):
                key = (_count(portion, "epoch"), _count(portion, "worker"))
                if key[1] >= stream.workers:
                    raise ValueError(f"consumer state: worker {key[1]} is not one of {stream.workers} "
                                     f"portions in {portion!r:.200}")
                stream.portions[key] = _Portion(_taken(portion), _count(portion, "samples"),
                                                bool(portion.get("ended", False)))


def merge_states(states: Iterable[Any]) -> dict:
    """The union of several consumers' states (dicts or JSON file paths; the ranks of one zsplit job):
    per stream and (epoch, portion), taken united, samples summed, ended if any ended; each stream
    from the least epoch any of them is in; passes the least. ValueError for a malformed state, for
    none, or for a stream recorded with different numbers of portions."""
    records = []
    for state in states:
        record = Consumption()
        record.load_state_dict(load_state(state))
        records.append(record)
    if not records:
        raise ValueError("merge_states needs at least one consumer state")
    merged = Consumption()
    merged.passes = min(record.passes for record in records)
    for record in records:
        for name, stream in record.streams.items():
            into = merged.streams.setdefault(name, _Stream(stream.workers, stream.epoch))
            if into.workers != stream.workers:
                raise ValueError(f"the states record stream {name!r} with {into.workers} and "
                                 f"{stream.workers} portions: not one job's states")
            into.epoch = min(into.epoch, stream.epoch)
            for key, portion in stream.portions.items():
                into.portions[key] = into.portions.get(key, _Portion()).merged(portion)
    for stream in merged.streams.values():
        stream.portions = {key: p for key, p in stream.portions.items() if key[0] >= stream.epoch}
        stream.complete_epochs()
    return merged.state_dict()


@dataclass(frozen=True)
class ResumePlan:
    """What a restarted server does: serve `stream` in `portions` portions from `epoch` on, portion v
    of epoch e passing over the batch indices `taken(e, v)`. `consumed` maps (epoch, v) to an IndexSet
    (or to a count n, meaning indices 0..n-1)."""

    stream: str
    portions: int
    epoch: int
    consumed: dict[tuple[int, int], Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        normal = {key: value if isinstance(value, IndexSet) else IndexSet([[0, value]])
                  for key, value in self.consumed.items()}
        object.__setattr__(self, "consumed", normal)

    @property
    def workers(self) -> int:
        """The old name of `portions`."""
        return self.portions

    def taken(self, epoch: int, portion: int) -> IndexSet:
        """The batch indices of portion `portion` of `epoch` the consumers already have."""
        return self.consumed.get((epoch, portion), IndexSet())

    def skip(self, epoch: int, portion: int) -> int:
        """How many batches at the front of the portion the consumers already have (all of them
        when they were taken in order)."""
        return next(self.taken(epoch, portion).missing(1 << 62))

    @classmethod
    def from_state(cls, state: Any, stream: str | None = None) -> ResumePlan | None:
        """The plan for the consumer state `state` (a dict, or the path of a JSON file holding one;
        merge_states of several for a zsplit job); `stream` picks one when the state records
        several. None when it records no stream (the consumer has seen nothing: start from the
        beginning). ValueError for a malformed state."""
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
        return cls(name, found.workers, found.epoch, {key: p.taken for key, p in found.portions.items()})


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
    if not isinstance(state, dict) or state.get("version") not in (1, STATE_VERSION):
        raise ValueError(f"not a version-1 or -{STATE_VERSION} consumer state: {state!r:.200}")
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


def _taken(entry: dict) -> IndexSet:
    """A share's taken batch indices: its `taken` intervals (version 2) or [[0, batches]] (version 1);
    ValueError when they are malformed or disagree with `batches`."""
    if "taken" not in entry:
        return IndexSet([[0, _count(entry, "batches")]])
    if not isinstance(entry["taken"], list):
        raise ValueError(f"consumer state: taken must be a list of [start, stop], got {entry!r:.200}")
    try:
        taken = IndexSet(entry["taken"])
    except ValueError as exc:
        raise ValueError(f"consumer state: {exc} in {entry!r:.200}") from None
    if "batches" in entry and _count(entry, "batches") != len(taken):
        raise ValueError(f"consumer state: batches {entry['batches']!r} is not the count of taken "
                         f"{taken.intervals} in {entry!r:.200}")
    return taken
