"""The files of a decoded-image cache: one `.ten` file per entry, written atomically, read by mmap.

    store = EntryStore(directory, max_bytes=None, durable=False)   directory: one cache's sub-directory
    store.load(key)           the stored uint8 array, a zero-copy view of the file (None: no valid entry)
    store.save(key, array)    "stored", or "full" when it would pass max_bytes (nothing written)
    store.has(key)            whether an entry file exists (what `tensorcom prepare` skips)
    remove_stale_temporaries(directory)   delete what killed writers of this host left (tensorcom prepare)
    entry_name(key)           "ab/<sha1 of key>.ten": the entry's path inside the directory (pure)

Why one file per entry and not append-only segments with an index: an entry becomes visible only by
`os.replace` of a completely written temporary file, so a writer killed at any point (SIGKILL
included) leaves at most a `.tmp` file that no reader opens, and writers of the same entry in several processes (workers,
servers, jobs) need no lock: the last rename wins, and both wrote the same bytes. Nothing is shared
but the file system, so no index can disagree with the data, resuming a fill is "skip what exists",
and every process maps the same pages of the page cache. The cost is one inode per image (4 KiB of
slack at most, under 2% of a 256-pixel RGB image); the 256 sub-directories keep directories small.

No fsync by default: a killed process cannot tear an entry (the rename follows the whole write and
the kernel keeps what was written), and a reader checks the entry's exact size and shape. Only a
power loss or kernel crash can leave a renamed entry whose data never reached the disk (typically
zero-filled or short: short is a miss, zero-filled would read as a black image). `durable=True`
fsyncs each entry before its rename, closing that case at a cost of the order of the decode itself.

Entries are tenbin `.ten` files holding one HWC (or HW) uint8 array; `load` checks the whole file
decodes as exactly one uint8 array (tenbin checks every chunk's length), so a truncated or foreign
file is a miss, never a wrong image. Maps are copy-on-write (ACCESS_COPY): the array is writable for
its user (torch.from_numpy needs that) while its pages stay shared until someone writes to them.

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
from typing import Any

import numpy as np

from tensorcom import tenbin
from tensorcom.errors import DecodeError

BUDGET_FILE = "budget.log"
_RECORD = struct.Struct("<q")


def entry_name(key: str) -> str:
    """Where the entry of sample key `key` lives inside a cache directory: "ab/<40 hex>.ten"."""
    digest = hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()
    return os.path.join(digest[:2], digest + ".ten")


class _Gather:
    """A write-only stream that keeps what is written to it (buffers, not copies)."""

    def __init__(self):
        self.parts: list = []

    def write(self, data: Any) -> None:
        self.parts.append(data)


def entry_buffers(array: np.ndarray) -> list:
    """The `.ten` file of `array` as buffers to write in order (tenbin's framing; the pixels are a
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


_writer: tuple[int, str] | None = None  # (pid, "host.pid") of this process, for temporary names


def _writer_name() -> str:
    """"host.pid" of this process (what remove_stale_temporaries reads back from a temporary name)."""
    global _writer
    if _writer is None or _writer[0] != os.getpid():
        _writer = (os.getpid(), f"{socket.gethostname()}.{os.getpid()}")
    return _writer[1]


def entry_bytes(array: np.ndarray) -> int:
    """The size of the `.ten` file of `array` (header chunk + data chunk, each padded to 64 bytes)."""
    header = 16 + 64  # marker, length, [dtype, info, rank, dims...] (rank <= 5) padded to 64
    return header + 16 + -(-array.nbytes // 64) * 64


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
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
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


class EntryStore:
    """The entries of one cache directory (created on the first save); `max_bytes` None: unbounded;
    `durable`: fsync each entry before it appears (survives a power loss; see the module docstring)."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int | None = None, durable: bool = False):
        self.directory, self.max_bytes, self.durable = os.fspath(directory), max_bytes, durable
        self._budget: Budget | None = None
        self._full = False
        self._folders: set[str] = set()  # the entry folders this process made (or found)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_budget": None, "_full": False, "_folders": set()}

    def path(self, key: str) -> str:
        return os.path.join(self.directory, entry_name(key))

    def has(self, key: str) -> bool:
        return os.path.exists(self.path(key))

    def load(self, key: str) -> np.ndarray | None:
        """The entry of `key` as a uint8 array over a copy-on-write map of its file, or None when
        there is none or it is not exactly one uint8 array."""
        try:
            fd = os.open(self.path(key), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
        except ValueError:  # an empty file cannot be mapped
            return None
        finally:
            os.close(fd)
        try:
            arrays = tenbin.decode_buffer(memoryview(mapped))
        except DecodeError:
            return None
        if len(arrays) != 1 or arrays[0].dtype != np.uint8 or arrays[0].ndim not in (2, 3):
            return None
        return arrays[0]

    def save(self, key: str, array: np.ndarray) -> str:
        """Write `array` (uint8) as the entry of `key`: "stored", or "full" when it does not fit."""
        if self.max_bytes is not None:
            if self._full or not self._reserve(entry_bytes(array)):
                self._full = True
                return "full"
        final = self.path(key)
        folder = os.path.dirname(final)
        if folder not in self._folders:
            os.makedirs(folder, exist_ok=True)
            self._folders.add(folder)
        temporary = f"{final}.{_writer_name()}.{os.urandom(4).hex()}.tmp"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                _write_all(fd, entry_buffers(array))
                if self.durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, final)  # the entry appears whole or not at all
        except BaseException:
            _remove(temporary)
            raise
        return "stored"

    def _reserve(self, size: int) -> bool:
        if self._budget is None:
            os.makedirs(self.directory, exist_ok=True)
            self._budget = Budget(self.directory, self.max_bytes)
        return self._budget.take(size)

    def close(self) -> None:
        if self._budget is not None:
            self._budget.close()


def remove_stale_temporaries(directory: str | os.PathLike) -> int:
    """Delete the temporary files that writers of this host left when they were killed (their
    process is gone); returns how many. Writers on other hosts sharing the directory are left alone."""
    host, removed = socket.gethostname(), 0
    for folder, _, names in os.walk(directory):
        for name in names:  # <sha1>.ten.<host>.<pid>.<random>.tmp (the host may hold dots)
            parts = name[name.find(".ten.") + 5:-4].rsplit(".", 2) if name.endswith(".tmp") else []
            if len(parts) == 3 and parts[0] == host and not _alive(parts[1]):
                _remove(os.path.join(folder, name))
                removed += 1
    return removed


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
