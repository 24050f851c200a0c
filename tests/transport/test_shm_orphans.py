"""Segments of the shared-memory handoff never outlive their server (transport/sharing/handoff.py):
a server holds a lock on each of its segments while it lives; when it was SIGKILLed together with its
resource tracker, the next server or consumer of the handoff on the host unlinks what it left."""

from __future__ import annotations

import glob
import os
import secrets
import signal

import pytest

from tensorcom import Connection
from tensorcom.transport.sharing import handoff
from tensorcom.transport.sharing.handoff import MIN_BYTES, Arena, Reader, sweep

pytestmark = pytest.mark.skipif(not os.path.isdir(handoff.SHM_DIR) or handoff._posixshmem is None,
                                reason="no POSIX shared memory listed in /dev/shm here")


class _Item:
    """A stand-in for a server's batch: frames, their size, and a lifetime (weakref-able)."""

    def __init__(self, frames: list):
        self.frames, self.nbytes = frames, sum(len(f) for f in frames)


def segments_of(server_id: str) -> list[str]:
    return sorted(glob.glob(f"{handoff.SHM_DIR}/tensorcom-{server_id}-*"))


def data_segments_of(server_id: str) -> list[str]:
    """The server's segments that carry batches (a free one is kept), not the probe of its offer."""
    return [name for name in segments_of(server_id) if not name.endswith("probe")]


def unlocked_segment(name: str) -> str:
    """A segment as a killed server leaves it: there, with nobody holding it (and no resource tracker)."""
    fd = handoff._posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    os.ftruncate(fd, 4096)
    os.close(fd)
    return os.path.join(handoff.SHM_DIR, name)


def test_only_segments_nobody_holds_are_swept_and_only_once_old_enough():
    server_id = secrets.token_hex(6)
    arena = Arena(server_id)
    item = _Item([b"x" * MIN_BYTES])
    orphan = unlocked_segment(f"tensorcom-orphan{secrets.token_hex(4)}-0")
    try:
        arena.accept("peer", True)
        assert arena.ref("peer", item) is not None
        held = segments_of(server_id)
        assert held and os.path.exists(orphan)
        assert os.path.basename(orphan) not in sweep()  # too young: its creator may be about to lock it
        assert os.path.exists(orphan)
        removed = sweep(min_age=0)
        assert os.path.basename(orphan) in removed and not os.path.exists(orphan)
        assert segments_of(server_id) == held  # a live server's segments stay, however old
    finally:
        arena.close()
        if os.path.exists(orphan):
            os.unlink(orphan)
    assert segments_of(server_id) == []


def test_a_consumer_that_accepts_an_offer_sweeps_too(monkeypatch):
    arena = Arena(secrets.token_hex(6))
    orphan = unlocked_segment(f"tensorcom-orphan{secrets.token_hex(4)}-0")
    monkeypatch.setattr(handoff, "STALE_AFTER", 0.0)
    try:
        assert Reader.accepts(arena.offer()) == arena.prefix
        assert not os.path.exists(orphan)
    finally:
        arena.close()
        if os.path.exists(orphan):
            os.unlink(orphan)


@pytest.mark.net
def test_a_server_killed_with_its_resource_tracker_is_cleaned_up_by_the_next_server(free_port, popen, monkeypatch):
    url = f"127.0.0.1:{free_port()}"
    peer = os.path.join(os.path.dirname(__file__), "share_peer.py")
    server = popen.python(peer, "serve", f"zshare://{url}", "--batches", "1000", "--every", "0.05",
                          "--pad", str(2 * MIN_BYTES))
    with Connection(f"zjoin://{url}", credit=2, timeout=60) as consumer:
        consumer.recv()
        server_id = consumer._end.joiner.links[0].server
        for _ in range(50):  # the first batches may go as frames, before the server has the consumer's answer
            if data_segments_of(server_id):
                break
            consumer.recv()
        assert data_segments_of(server_id)  # (the probe alone goes when the answer arrives: not a witness)
        os.killpg(server.pid, signal.SIGKILL)  # the server and its resource tracker
        assert server.wait(timeout=20) == -signal.SIGKILL
        left = segments_of(server_id)
    assert left  # nobody was left to unlink them
    monkeypatch.setattr(handoff, "STALE_AFTER", 0.0)  # else only segments older than 2 s go
    later = Arena(secrets.token_hex(6))  # a later server making its arena
    later.close()
    assert segments_of(server_id) == []
