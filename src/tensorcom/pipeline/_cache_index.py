"""The in-memory index of a decoded-image cache: which segment, offset and length hold a key's entry.

    index = KeyIndex()
    record(sha, token, offset, length)   the 64-byte index.log record of one stored entry
    index.add_records(data)      whole 64-byte records of index.log (RECORD); malformed ones skipped
    index.add(sha, token, offset, length)   one entry this process just stored
    index.get(sha)               (token, offset, length) of the latest record for `sha`, or None
    len(index)                   how many keys (by their first 8 bytes)

A key is known by the first 8 bytes of its sha1, so that ImageNet's 1.28 M entries take about 28
bytes each in every process that reads the cache (sorted numpy arrays, searched by bisection, and a
dict of the few records added since the arrays were last merged) rather than the few hundred bytes
of a dict of Python objects. Two keys sharing those 8 bytes (about one chance in 10^7 among 1.28 M
keys) cost a miss, not a wrong image: the store checks the whole sha1 in the entry's prefix.
"""

from __future__ import annotations

import struct

import numpy as np

MAGIC = b"TcIndex1"
# magic, sha1 of the key (its first 8 bytes as the lookup key, then the rest), segment token, offset, length
RECORD = np.dtype([("magic", "S8"), ("key", "<u8"), ("rest", "V12"), ("token", "<u8"), ("offset", "<i8"),
                   ("length", "<i8"), ("pad", "V12")])
_RECORD = struct.Struct("<8s20s8sqq12x")  # the same record, for a few at a time
assert RECORD.itemsize == _RECORD.size == 64
_MERGE_AT = 4096  # records kept in the dict before they are merged into the sorted arrays


def record(sha: bytes, token: bytes, offset: int, length: int) -> bytes:
    """The index.log record (RECORD) placing the entry of sha1 `sha` at `offset` of segment `token`."""
    return _RECORD.pack(MAGIC, sha, token, offset, length)


def short_key(sha: bytes) -> int:
    """The lookup key of a sha1: its first 8 bytes as a little-endian unsigned int (as RECORD reads them)."""
    return int.from_bytes(sha[:8], "little")


class KeyIndex:
    """See the module docstring. Not thread-safe: its store serializes the calls that add records."""

    def __init__(self):
        self.tokens: list[bytes] = []
        self._token_ids: dict[bytes, int] = {}
        # sorted keys and their (token id, offset, length) rows, replaced together (get reads them unlocked)
        self._sorted = (np.empty(0, np.uint64), np.empty((0, 3), np.int64))
        self._recent: dict[int, tuple[int, int, int]] = {}

    def __len__(self) -> int:
        self._merge()
        return len(self._sorted[0])

    def _token_id(self, token: bytes) -> int:
        found = self._token_ids.get(token)
        if found is None:
            found = self._token_ids[token] = len(self.tokens)
            self.tokens.append(token)
        return found

    def add(self, sha: bytes, token: bytes, offset: int, length: int) -> None:
        self._recent[short_key(sha)] = (self._token_id(token), offset, length)
        if len(self._recent) >= _MERGE_AT:
            self._merge()

    def add_records(self, data: bytes) -> None:
        """Add whole RECORDs (len(data) a multiple of 64), later ones winning over earlier ones."""
        if len(data) < 64 * RECORD.itemsize:  # a few (a refresh between saves): no arrays
            for magic, sha, token, offset, length in _RECORD.iter_unpack(data):
                if magic == MAGIC and offset >= 0 and length > 0:
                    self._recent[short_key(sha)] = (self._token_id(token), offset, length)
        else:
            records = _valid(data)
            self._merge()
            unique, inverse = np.unique(records["token"], return_inverse=True)
            ids = np.array([self._token_id(int(token).to_bytes(8, "little")) for token in unique], np.int64)
            places = np.stack([ids[inverse.reshape(-1)], records["offset"], records["length"]], axis=1)
            self._sorted = _latest(self._sorted, records["key"], places)
        if len(self._recent) >= _MERGE_AT:
            self._merge()

    def get(self, sha: bytes) -> tuple[bytes, int, int] | None:
        key = short_key(sha)
        place = self._recent.get(key)
        if place is None:
            keys, places = self._sorted
            at = int(np.searchsorted(keys, np.uint64(key)))
            if at == len(keys) or int(keys[at]) != key:
                return None
            place = places[at].tolist()
        return self.tokens[place[0]], place[1], place[2]

    def _merge(self) -> None:
        if self._recent:
            keys = np.fromiter(self._recent.keys(), np.uint64, len(self._recent))
            places = np.array(list(self._recent.values()), np.int64).reshape(-1, 3)
            self._sorted = _latest(self._sorted, keys, places)
            self._recent = {}  # after the arrays that now hold its records


def _valid(data: bytes) -> np.ndarray:
    """The well-formed RECORDs among the whole ones in `data`."""
    records = np.frombuffer(data, RECORD, len(data) // RECORD.itemsize)
    return records[(records["magic"] == MAGIC) & (records["offset"] >= 0) & (records["length"] > 0)]


def segment_ends(data: bytes, prefix: int) -> dict[bytes, int]:
    """token -> where the last entry that any record in `data` (index.log's bytes) places in that
    segment ends (entries being a `prefix` and `length` bytes), over every record, superseded or not."""
    records = _valid(data)
    ends = records["offset"] + prefix + records["length"]
    return {int(token).to_bytes(8, "little"): int(ends[records["token"] == token].max())
            for token in np.unique(records["token"])}


def _latest(merged: tuple[np.ndarray, np.ndarray], keys: np.ndarray, places: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """(keys, places) of `merged` and then `keys`, `places` (rows), sorted without repeats: of each
    repeated key the last row."""
    keys, places = np.concatenate([merged[0], keys]), np.concatenate([merged[1], places])
    order = np.argsort(keys, kind="stable")
    keys, places = keys[order], places[order]
    last = np.append(keys[1:] != keys[:-1], True) if len(keys) else np.empty(0, bool)
    return keys[last], places[last]
