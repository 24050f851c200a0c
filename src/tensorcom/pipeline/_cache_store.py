"""The files of a decoded-image cache: append-only segments, one per writing process, and one index.

    store = EntryStore(directory, max_bytes=None, durable=False)   directory: one cache's sub-directory
    store.load(key)           the stored uint8 array, a zero-copy view of its segment (None: no valid entry)
    store.save(key, array)    "stored", or "full" when it would pass max_bytes (nothing written)
    store.has(key)            whether the index holds an entry for `key` (what a resumed fill skips)
    len(store)                how many keys have an entry
    cut_stale_tails(directory)   cut what killed writers of this host left unindexed (tensorcom prepare)
    entry_buffers(array), entry_bytes(array)   an entry's `.ten` bytes as buffers to write, and its size

Layout: each process that stores entries appends them to a segment of its own, `<host>.<pid>.<token>.seg`
(created on its first save), and after each entry one 64-byte record to `index.log`, shared by every
writer (O_APPEND): [magic, sha1 of the key, the segment's token, offset, length]. An entry in a segment
is a 64-byte prefix [magic, sha1 of the key, length] followed by the `.ten` file of the array (tenbin:
one HWC or HW uint8 array). Readers read the index (only what was appended since they last looked),
keep each segment open, map each entry where they load it (copy-on-write, ACCESS_COPY: the array is
writable for its user, torch.from_numpy needs that, while its pages stay shared until someone writes
to them; what one user writes, no other load sees) and hand out a view of that map: no file is
opened, created or renamed per entry, and every process of the machine maps the same pages of the
page cache.

Crash safety: a record is appended only after its entry is completely written, so a writer killed at
any point (SIGKILL included) leaves at most an unindexed tail in its own segment, which no reader
reads (cut_stale_tails cuts it off). A record is 64 bytes at a multiple of 64, so it never
straddles a page and is appended whole or not at all. A reader checks that a record's magic is right,
that its entry lies inside the segment, that the entry's prefix names the same key and length, and
that the bytes decode as exactly one uint8 array (tenbin checks every chunk's length): a damaged or
foreign record is a miss, never a wrong image. Writers need no lock: the same key stored by several
processes at once gives several records for the same bytes, and a reader takes the latest it has
read. Why not a file per entry (written to a temporary name, then renamed): creating, renaming and
opening a file per image cost about 0.1 ms of CPU per entry on this project's machine, as much as
writing its 560 KB of pixels. The index a process keeps in memory is tensorcom.pipeline._cache_index's.

No fsync by default: a killed process cannot tear an entry (the kernel keeps what was written), and
readers check what they map. Only a power loss or kernel crash can leave a record whose entry never
reached the disk (zeros fail the prefix check; a partly written one could read as a partly black
image). `durable=True` fsyncs each segment before its record is appended, closing that case at a cost
of the order of the decode itself.

The size bound: every writer appends the size of each entry it is about to write to `budget.log`
in the directory (8-byte records, O_APPEND) after reading the records the others appended, and
writes nothing when the total would pass max_bytes. Concurrent writers can pass it by at most one
entry each; a killed writer's record counts an entry that never appeared (the bound errs low).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import socket
import struct
import threading
from typing import Any

import numpy as np

from tensorcom import tenbin
from tensorcom.errors import DecodeError
from tensorcom.pipeline._cache_index import RECORD, KeyIndex, record, segment_ends

BUDGET_FILE = "budget.log"
INDEX_FILE = "index.log"
_RECORD = struct.Struct("<q")
_PREFIX = struct.Struct("<8s20sq28x")  # magic, sha1 of the key, length of the .ten bytes that follow: 64
_PREFIX_MAGIC = b"TcEntry1"


def digest(key: str) -> bytes:
    """The 20-byte sha1 of an entry key: what the index and the entries' prefixes name it by."""
    return hashlib.sha1(key.encode("utf-8", "surrogatepass")).digest()


def entry_bytes(array: np.ndarray) -> int:
    """What the entry of `array` takes in its segment (and counts against max_bytes): the 64-byte
    prefix and the `.ten` bytes (header chunk + data chunk, each framed and padded to 64 bytes)."""
    header = 16 + 64  # marker, length, [dtype, info, rank, dims...] (rank <= 5) padded to 64
    return _PREFIX.size + header + 16 + -(-array.nbytes // 64) * 64


class _Gather:
    """A write-only stream that keeps what is written to it (buffers, not copies)."""

    def __init__(self):
        self.parts: list = []

    def write(self, data: Any) -> None:
        self.parts.append(data)


def entry_buffers(array: np.ndarray) -> list:
    """The `.ten` bytes of `array` as buffers to write in order (tenbin's framing; the pixels are a
    view of the array, not a copy)."""
    gather = _Gather()
    tenbin.write(gather, [np.ascontiguousarray(array)])
    return gather.parts


def _write_all(fd: int, buffers: list) -> None:
    """os.writev every byte of `buffers` to `fd` (in as few calls as the kernel takes)."""
    views = [memoryview(buffer).cast("B") for buffer in buffers]
    while views:
        written = os.writev(fd, views)
        while views and written >= views[0].nbytes:
            written -= views.pop(0).nbytes
        if views:
            views[0] = views[0][written:]


class Budget:
    """The shared byte count of one cache directory (see the module docstring); `take(n)` reserves n
    bytes and says whether they fit under `limit`. Files open on first use; not picklable while open."""

    def __init__(self, directory: str, limit: int):
        self.path, self.limit = os.path.join(directory, BUDGET_FILE), limit
        self.total = 0
        self._offset = 0
        self._fd: int | None = None

    def _refresh(self) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        end = os.fstat(self._fd).st_size // _RECORD.size * _RECORD.size  # whole records only
        if end > self._offset:
            data = os.pread(self._fd, end - self._offset, self._offset)
            self.total += sum(size for (size,) in _RECORD.iter_unpack(data))
            self._offset = end

    def take(self, size: int) -> bool:
        """Reserve `size` bytes: True (and recorded for every process) when the total stays <= limit."""
        if size > self.limit - self.total:
            return False
        self._refresh()
        if self.total + size > self.limit:
            return False
        os.write(self._fd, _RECORD.pack(size))
        return True

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class _Segment:
    """This process's segment: `<host>.<pid>.<token>.seg`, appended to by os.writev."""

    def __init__(self, directory: str):
        self.token, self.pid = os.urandom(8), os.getpid()
        self.name = f"{socket.gethostname()}.{self.pid}.{self.token.hex()}.seg"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        self.fd, self.end = os.open(os.path.join(directory, self.name), flags, 0o644), 0

    def close(self) -> None:
        os.close(self.fd)


class EntryStore:
    """The entries of one cache directory (created on the first save); `max_bytes` None: unbounded;
    `durable`: fsync each entry before it appears (survives a power loss; see the module docstring).
    Picklable: files open where it is used."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int | None = None, durable: bool = False):
        self.directory, self.max_bytes, self.durable = os.fspath(directory), max_bytes, durable
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()  # threads of one process share a store: one writer at a time
        self._budget: Budget | None = None
        self._full = False
        self._segment: _Segment | None = None
        self._index_fd: int | None = None
        self._read_to = 0  # how much of the index this process has read
        self._entries = KeyIndex()  # sha1 -> (token, offset, length)
        self._names: dict[bytes, str] = {}  # token -> segment file name
        self._readers: dict[bytes, list[int]] = {}  # token -> [open fd of the segment, its size when last seen]

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "max_bytes": self.max_bytes, "durable": self.durable}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __len__(self) -> int:
        self._refresh()
        return len(self._entries)

    def has(self, key: str) -> bool:
        self._refresh()
        return self._entries.get(digest(key)) is not None

    def load(self, key: str) -> np.ndarray | None:
        """The entry of `key` as a uint8 array viewing a copy-on-write map of its segment, or None when
        there is none or it does not check out (see the module docstring)."""
        sha = digest(key)
        where = self._entries.get(sha)
        if where is None:
            self._refresh()
            where = self._entries.get(sha)
            if where is None:
                return None
        token, offset, length = where
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        mapped = self._map(token, start, offset + _PREFIX.size + length)
        if mapped is None:
            return None
        magic, named, size = _PREFIX.unpack_from(mapped, offset - start)
        if magic != _PREFIX_MAGIC or named != sha or size != length:
            return None
        try:
            arrays = tenbin.decode_buffer(memoryview(mapped)[offset - start + _PREFIX.size:])
        except DecodeError:
            return None
        if len(arrays) != 1 or arrays[0].dtype != np.uint8 or arrays[0].ndim not in (2, 3):
            return None
        return arrays[0]

    def save(self, key: str, array: np.ndarray) -> str:
        """Append `array` (uint8) as the entry of `key`: "stored", or "full" when it does not fit."""
        buffers = entry_buffers(array)
        length, sha = sum(memoryview(buffer).nbytes for buffer in buffers), digest(key)
        with self._lock:
            if self.max_bytes is not None:
                if self._full or not self._reserve(_PREFIX.size + length):
                    self._full = True
                    return "full"
            segment = self._writer()
            try:
                _write_all(segment.fd, [_PREFIX.pack(_PREFIX_MAGIC, sha, length), *buffers])
                if self.durable:
                    os.fsync(segment.fd)
            except BaseException:  # a torn tail no record points at; the next entry goes to a new segment
                self._segment = None
                segment.close()
                raise
            offset, segment.end = segment.end, segment.end + _PREFIX.size + length
            os.write(self._index(), record(sha, segment.token, offset, length))
            self._entries.add(sha, segment.token, offset, length)
            self._names[segment.token] = segment.name
        return "stored"

    def _writer(self) -> _Segment:
        if self._segment is None or self._segment.pid != os.getpid():  # a forked child opens its own
            os.makedirs(self.directory, exist_ok=True)
            self._segment = _Segment(self.directory)
        return self._segment

    def _index(self) -> int:
        if self._index_fd is None:
            os.makedirs(self.directory, exist_ok=True)
            flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            self._index_fd = os.open(os.path.join(self.directory, INDEX_FILE), flags, 0o644)
        return self._index_fd

    def _refresh(self) -> None:
        """Read the index records appended since the last look (whole, well-formed records only; of
        several records for one key, the latest)."""
        if self._index_fd is None and not os.path.exists(os.path.join(self.directory, INDEX_FILE)):
            return
        with self._lock:
            fd = self._index()
            end = os.fstat(fd).st_size // RECORD.itemsize * RECORD.itemsize
            if end <= self._read_to:
                return
            while self._read_to < end:  # at most 1 M records (64 MB) at a time
                data = os.pread(fd, min(end - self._read_to, RECORD.itemsize << 20), self._read_to)
                usable = len(data) // RECORD.itemsize * RECORD.itemsize
                if not usable:
                    break
                self._entries.add_records(data[:usable])
                self._read_to += usable

    def _map(self, token: bytes, start: int, end: int) -> mmap.mmap | None:
        """A copy-on-write map of bytes [start, end) of the segment `token` (start page-aligned), or
        None when the segment is not there or not that long. Each load maps its entry anew, so what
        one user writes into its array (its private copy of the pages) no other load sees."""
        reader = self._readers.get(token) or self._open(token)
        if reader is None:
            return None
        if reader[1] < end:
            reader[1] = os.fstat(reader[0]).st_size
            if reader[1] < end:
                return None
        return mmap.mmap(reader[0], end - start, access=mmap.ACCESS_COPY, offset=start)

    def _open(self, token: bytes) -> list[int] | None:
        """[fd, 0] of the segment `token`, opened once for all threads; None when it is not there."""
        with self._lock:
            if token not in self._readers:
                name = self._names.get(token) or self._find(token)
                try:
                    fd = os.open(os.path.join(self.directory, name), os.O_RDONLY | os.O_CLOEXEC) if name else None
                except FileNotFoundError:
                    fd = None
                if fd is None:
                    return None
                self._readers[token] = [fd, 0]
            return self._readers[token]

    def _find(self, token: bytes) -> str | None:
        """The name of the segment whose token is `token` (listing the directory for new ones)."""
        for name in os.listdir(self.directory):
            found = _token(name)
            if found is not None:
                self._names.setdefault(found, name)
        return self._names.get(token)

    def _reserve(self, size: int) -> bool:  # under the lock
        if self._budget is None:
            os.makedirs(self.directory, exist_ok=True)
            self._budget = Budget(self.directory, self.max_bytes)
        return self._budget.take(size)

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, AttributeError):  # already closed, or torn down at interpreter exit
            pass

    def close(self) -> None:
        """Close the files (maps stay valid while arrays view them); the store opens them again if used."""
        if self._budget is not None:
            self._budget.close()
        if self._segment is not None:
            self._segment.close()
        if self._index_fd is not None:
            os.close(self._index_fd)
        for fd, _ in self._readers.values():
            os.close(fd)
        self._reset()


def cut_stale_tails(directory: str | os.PathLike) -> int:
    """Cut off the unindexed tails that writers of this host left in their segments when they were
    killed (their process is gone); returns how many segments were cut. Segments of writers on other
    hosts sharing the directory, and of live ones, are left alone."""
    directory, host = os.fspath(directory), socket.gethostname()
    if not os.path.isdir(directory):
        return 0
    try:
        with open(os.path.join(directory, INDEX_FILE), "rb") as index:
            ends = segment_ends(index.read(), _PREFIX.size)
    except FileNotFoundError:
        ends = {}
    cut = 0
    for name in os.listdir(directory):
        parts, token = name[:-4].rsplit(".", 2), _token(name)
        if token is not None and len(parts) == 3 and parts[0] == host and not _alive(parts[1]):
            path, end = os.path.join(directory, name), ends.get(token, 0)
            if end == 0:  # no entry of it was ever indexed
                os.unlink(path)
                cut += 1
            elif os.path.getsize(path) > end:
                os.truncate(path, end)
                cut += 1
    return cut


def _token(name: str) -> bytes | None:
    """The token of a segment file name "<host>.<pid>.<token hex>.seg"; None for any other name."""
    if not name.endswith(".seg"):
        return None
    try:
        token = bytes.fromhex(name[:-4].rsplit(".", 1)[-1])
    except ValueError:
        return None
    return token if len(token) == 8 else None


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True
