"""Shared-memory handoff: a sharing server hands batches to consumers on its own host through POSIX
shared memory instead of copying them into each consumer's socket (docs/protocol.md §7.8).

The server writes a batch's wire frames once into a segment of its `Arena` and sends each such
consumer only a reference (`{"seg", "gen", "frames": [[offset, length], ...]}`) in the batch's control
frame, so a consumer more costs a small message, not a copy of the batch through the kernel. Batches under
`MIN_BYTES` always go as frames. The
consumer (`Reader`) copies the frames out into memory of its own before it acknowledges the batch;
what it yields is its own, and the segment goes back to the arena once no consumer and no replay
buffer needs the batch (the item that holds the placement is gone).

Who may use it is found out, not guessed: the server's `welcome` offers the name of a probe segment
and a random token; a consumer that can open the segment and read the token there says `shm {ok}`,
and from then on gets references. A consumer on another host, in another IPC namespace or without
permission to open the segment says no (or nothing) and keeps getting the frames.

Segments outlive nobody. The server holds a shared `flock` on each segment's descriptor for as long
as it keeps the segment; the kernel drops it when the server ends, however it ends. The resource
tracker unlinks the segments of a server that was killed alone; when the tracker was killed too (a
SIGKILL of the whole process group), the next server or consumer on the host to take part in the
handoff removes them (`sweep`: a `tensorcom-*` segment older than STALE_AFTER that nobody locks).

Segment layout: 64 header bytes (`MAGIC`, then the generation as little-endian u64), the frames
after. The server writes generation 0, the frames, then the batch's generation; a reader checks the
generation before and after its copy, so a segment reused too early is a DecodeError, never a torn
batch.
"""

from __future__ import annotations

import itertools
import mmap
import os
import secrets
import struct
import time
import warnings
import weakref
from multiprocessing import shared_memory
from typing import Any

from tensorcom import settings
from tensorcom.errors import DecodeError

try:  # CPython's POSIX shared memory (what multiprocessing.shared_memory uses)
    import _posixshmem
except ImportError:  # pragma: no cover - not POSIX: no handoff, consumers get frames
    _posixshmem = None
try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

MAGIC = b"TCSHM\x00\x01\x00"
HEADER = 64  # bytes before the first frame
MIN_BYTES = 1 << 16  # smaller batches go as frames: copying them costs less than a segment kept for them
GRANULE = 1 << 16  # segment sizes are rounded up to this, so segments are reused across batch sizes
MAX_OPEN = 64  # segments a reader keeps mapped
MAX_FREE = 16  # free segments the server keeps for reuse
TOKEN_BYTES = 16
SHM_DIR = "/dev/shm"  # where POSIX shared memory segments are listed (Linux)
STALE_AFTER = 2.0  # seconds: a younger unlocked segment may be one its creator has not locked yet


def create_segment(name: str, size: int) -> shared_memory.SharedMemory:
    """A new segment of `size` bytes whose memory is reserved now (OSError, not a SIGBUS on first write,
    when /dev/shm is too small)."""
    segment = shared_memory.SharedMemory(name, create=True, size=size)
    try:
        fd = getattr(segment, "_fd", -1)
        if fd >= 0 and fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_SH)  # held while this process keeps the segment (see `sweep`)
        if fd >= 0 and hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
    except BaseException:
        _discard(segment)
        raise
    return segment


def sweep(directory: str = SHM_DIR, min_age: float | None = None) -> list[str]:
    """Unlink the segments in `directory` named `tensorcom-*` that no live process holds: servers
    killed together with their resource tracker left them. A segment younger than `min_age` seconds
    (default STALE_AFTER) is left alone (its creator may not have locked it yet), and so is one this
    process may not open or unlink. Returns the names removed (none where segments are not listed in
    `directory`)."""
    min_age = STALE_AFTER if min_age is None else min_age
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("tensorcom-"))
    except OSError:
        return []
    removed = []
    for name in names:
        path = os.path.join(directory, name)
        if _orphaned(path, min_age):
            try:
                os.unlink(path)
                removed.append(name)
            except OSError:
                pass
    return removed


def _orphaned(path: str, min_age: float) -> bool:
    """Whether the segment at `path` is at least `min_age` seconds old and nobody holds its lock."""
    if fcntl is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if time.time() - os.fstat(fd).st_ctime < min_age:
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError while its server lives
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # the lock goes with it


class Mapping:
    """A segment of another process mapped read-only: `buf` (a memoryview), `size`, close(). Not
    registered with multiprocessing's resource tracker, which would unlink the server's segment when
    this process exits (or forget the server's own registration when both share a tracker)."""

    def __init__(self, name: str):
        fd = _posixshmem.shm_open("/" + name, os.O_RDONLY, mode=0)
        try:
            self.size = os.fstat(fd).st_size
            self._map = mmap.mmap(fd, self.size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self.buf = memoryview(self._map)

    def close(self) -> None:
        self.buf.release()
        self._map.close()


def _discard(segment: shared_memory.SharedMemory) -> None:
    """Close and unlink a segment this process created, ignoring one already gone."""
    try:
        segment.close()
        segment.unlink()
    except (OSError, BufferError):
        pass


class _Placement:
    """A batch written into a segment: the segment, and the reference consumers are sent."""

    def __init__(self, segment: shared_memory.SharedMemory, generation: int, spans: list):
        self.segment = segment
        self.ref = {"seg": segment.name.lstrip("/"), "gen": generation, "frames": spans}


class Arena:
    """The server's segments (named `tensorcom-<server id>-<n>`), the probe it offers, and which
    consumer accepted it. Used by the sharing server's thread only."""

    def __init__(self, server_id: str):
        sweep()  # what servers killed with their resource tracker left behind
        self.prefix = f"tensorcom-{server_id}-"
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.peers: set = set()  # consumers that read references
        self.failed: str | None = None  # why placing stopped (e.g. /dev/shm full): frames from then on
        self._free: list[shared_memory.SharedMemory] = []
        self._all: list[shared_memory.SharedMemory] = []
        self._placed: dict[int, _Placement] = {}  # id(item) -> its placement, while the item lives
        self._names = itertools.count()
        self._generations = itertools.count(1)
        self.probe: shared_memory.SharedMemory | None = None  # exists only while an answer is awaited
        self._awaited = 0  # offers not answered yet

    def offer(self) -> dict:
        """What `welcome` carries for a consumer that asked: the probe's name and token. The probe is
        made for it, and unlinked once every offer made was answered (a killed server leaves it
        behind only while an answer is on its way)."""
        if self.probe is None:
            self.probe = create_segment(self.prefix + "probe", HEADER)
            self.probe.buf[: len(MAGIC) + TOKEN_BYTES] = MAGIC + self.token
        self._awaited += 1
        return {"name": self.probe.name.lstrip("/"), "token": self.token.hex()}

    def accept(self, peer: Any, ok: Any) -> None:
        """A consumer's answer to the offer."""
        self._awaited = max(self._awaited - 1, 0)
        if self._awaited == 0 and self.probe is not None:
            _discard(self.probe)
            self.probe = None
        if ok is True and self.failed is None:
            self.peers.add(peer)
        else:
            self.peers.discard(peer)

    def forget(self, peer: Any) -> None:
        self.peers.discard(peer)

    def ref(self, peer: Any, item: Any) -> dict | None:
        """The reference to send `peer` for batch `item` (placed on first use), or None: send frames."""
        if peer not in self.peers or self.failed is not None or item.nbytes < MIN_BYTES:
            return None
        placement = self._placed.get(id(item))
        if placement is None:
            try:
                placement = self._place(item.frames)
            except OSError as exc:  # /dev/shm full or forbidden: every consumer gets frames from now on
                self.failed = f"shared memory unavailable: {exc}"
                warnings.warn(f"sharing server {self.prefix[:-1]}: {self.failed}; consumers get frames", stacklevel=2)
                return None
            self._placed[id(item)] = placement
            weakref.finalize(item, self._release, id(item))
        return placement.ref

    def _place(self, frames: list) -> _Placement:
        """Write `frames` (zmq.Frames or bytes-like) into a segment, generation 0 while writing."""
        views = [memoryview(f.buffer if hasattr(f, "buffer") else f).cast("B") for f in frames]
        segment = self._segment(HEADER + sum(v.nbytes for v in views))
        generation = next(self._generations)
        buf = segment.buf
        buf[8:16] = bytes(8)
        spans, offset = [], HEADER
        for view in views:
            buf[offset : offset + view.nbytes] = view
            spans.append([offset, view.nbytes])
            offset += view.nbytes
        buf[8:16] = struct.pack("<Q", generation)
        return _Placement(segment, generation, spans)

    def _segment(self, size: int) -> shared_memory.SharedMemory:
        """A free segment of at least `size` bytes (at most twice that), else a new one."""
        fitting = [s for s in self._free if size <= s.size <= 2 * size + GRANULE]
        if fitting:
            segment = min(fitting, key=lambda s: s.size)
            self._free.remove(segment)
            return segment
        rounded = -(-size // GRANULE) * GRANULE
        segment = create_segment(f"{self.prefix}{next(self._names)}", rounded)
        segment.buf[:8] = MAGIC
        self._all.append(segment)
        return segment

    def _release(self, key: int) -> None:
        """A placed batch is no longer needed: its segment is free again, or unlinked when MAX_FREE
        segments are free already (batch sizes that changed must not leave /dev/shm growing)."""
        placement = self._placed.pop(key, None)
        if placement is None or placement.segment not in self._all:
            return
        if len(self._free) < MAX_FREE:
            self._free.append(placement.segment)
        else:
            self._all.remove(placement.segment)
            _discard(placement.segment)

    def close(self) -> None:
        """Unlink every segment (consumers that still map one keep their mapping until they drop it)."""
        for segment in [*self._all, *([self.probe] if self.probe is not None else [])]:
            _discard(segment)
        self._all, self._free, self._placed, self.probe = [], [], {}, None


class Reader:
    """A consumer's side: checks a server's offer, and copies referenced batches out of its segments."""

    def __init__(self) -> None:
        self._open: dict[str, Mapping] = {}  # name -> segment, oldest first

    @staticmethod
    def accepts(offer: Any) -> str | None:
        """The segment name prefix of a server whose `offer` this process can read (its probe holds
        the token), else None."""
        if not (isinstance(offer, dict) and isinstance(offer.get("name"), str) and isinstance(offer.get("token"), str)):
            return None
        name = offer["name"]
        if not (name.startswith("tensorcom-") and name.endswith("-probe")):
            return None
        try:
            token = bytes.fromhex(offer["token"])
            probe = Mapping(name)
        except (OSError, ValueError, AttributeError):  # AttributeError: no _posixshmem here
            return None
        try:
            found = bytes(probe.buf[: len(MAGIC) + len(token)])
        finally:
            probe.close()
        if found != MAGIC + token:
            return None
        sweep()  # a consumer of the handoff cleans up after killed servers too
        return name[: -len("probe")]

    def read(self, ref: Any, prefix: str) -> list[memoryview]:
        """The frames `ref` names, copied into memory of this process; DecodeError when the reference
        is malformed, names a segment outside `prefix`, or the segment was rewritten meanwhile."""
        name, generation, spans = _check_ref(ref, prefix)
        segment = self._segment(name)
        buf = segment.buf
        if any(offset < HEADER or offset + size > segment.size for offset, size in spans):
            raise DecodeError(f"shared-memory reference outside segment {name!r} ({segment.size} bytes)", 0, "frame")
        self._check_generation(buf, generation, name)
        out = bytearray(sum(size for _, size in spans))
        views, at = [], 0
        target = memoryview(out)
        for offset, size in spans:
            target[at : at + size] = buf[offset : offset + size]
            views.append(target[at : at + size])
            at += size
        self._check_generation(buf, generation, name)
        return views

    @staticmethod
    def _check_generation(buf: memoryview, generation: int, name: str) -> None:
        if bytes(buf[:8]) != MAGIC or struct.unpack("<Q", buf[8:16])[0] != generation:
            raise DecodeError(f"shared-memory segment {name!r} no longer holds batch generation {generation} "
                              "(reused before it was read)", 0, "frame")

    def _segment(self, name: str) -> Mapping:
        segment = self._open.pop(name, None)
        if segment is None:
            try:
                segment = Mapping(name)
            except (OSError, ValueError) as exc:
                raise DecodeError(f"cannot open shared-memory segment {name!r}: {exc}", 0, "frame") from None
            while len(self._open) >= MAX_OPEN:
                self._open.pop(next(iter(self._open))).close()
        self._open[name] = segment  # most recently used last
        return segment

    def close(self) -> None:
        for segment in self._open.values():
            segment.close()
        self._open = {}


def wants_handoff(choice: bool | None, endpoint: Any) -> bool:
    """Whether a consumer asks the server at `endpoint` for the handoff: `choice` when given, else
    when $TENSORCOM_SHM allows it and the server is on this host by its address (ipc, or tcp to a
    loopback address). The server's probe decides whether it is really used."""
    if choice is not None:
        return bool(choice)
    if not settings.shared_memory():
        return False
    if endpoint.transport != "tcp":
        return True
    host = endpoint.address.rsplit(":", 1)[0].strip("[]").lower()
    return host == "localhost" or host.startswith("127.") or host == "::1"


def _check_ref(ref: Any, prefix: str) -> tuple[str, int, list]:
    """(segment name, generation, [(offset, size)]) of a well-formed reference, else DecodeError."""
    ok = (isinstance(ref, dict) and isinstance(ref.get("seg"), str) and isinstance(ref.get("gen"), int)
          and isinstance(ref.get("frames"), list) and ref["frames"])
    spans = ref["frames"] if ok else []
    ok = ok and all(isinstance(s, list) and len(s) == 2 and all(type(v) is int and v >= 0 for v in s) for s in spans)
    if not ok:
        raise DecodeError(f"malformed shared-memory reference {ref!r:.200}", 0, "frame")
    if not ref["seg"].startswith(prefix) or "/" in ref["seg"]:
        raise DecodeError(f"shared-memory segment {ref['seg']!r} is not the server's (prefix {prefix!r})", 0, "frame")
    return ref["seg"], ref["gen"], [(offset, size) for offset, size in spans]
