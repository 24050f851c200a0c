"""The shared-memory handoff of the sharing schemes (transport/sharing/handoff.py, docs/protocol.md §7.8):
consumers on the server's host get references to one copy of each batch, copy it out, and get
exactly what frames would have given them; a consumer that does not ask, cannot read the probe or
says no gets frames; bad references are DecodeErrors naming what is wrong; segments are reused,
bounded, and unlinked when the server ends, whichever process exits first."""

from __future__ import annotations

import glob
import os
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
from conftest import soon
from sharing_threads import serve_in_thread  # tests/transport/sharing_threads.py

from tensorcom import Connection, wire
from tensorcom.errors import DecodeError
from tensorcom.transport.sharing import control
from tensorcom.transport.sharing.handoff import HEADER, MAGIC, MAX_FREE, MIN_BYTES, Arena, Reader, wants_handoff
from tensorcom.urls import parse

pytestmark = pytest.mark.net


def image_batch(i: int) -> dict:
    return {"image": np.full((8, 64, 64, 3), i % 251, np.uint8), "id": np.arange(8, dtype=np.int32) + 8 * i}


def segments_of(server_id: str) -> list[str]:
    return glob.glob(f"/dev/shm/tensorcom-{server_id}-*")


def check_batches(conn: Connection, batches: int, start: int = 0) -> int:
    """Iterate one pass; every batch is the one sent, and writable memory of this process."""
    count = 0
    for batch in conn:
        i = start + count
        assert (batch["image"] == i % 251).all() and batch["id"].tolist() == list(range(8 * i, 8 * i + 8))
        batch["image"][...] = 0  # ours to change: the next batches and other consumers are not touched
        count += 1
    assert count == batches
    return count


def test_a_consumer_on_this_host_takes_batches_from_shared_memory(free_port):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}")
    consumer = Connection(f"zjoin://{url}", credit=2)
    errors: list = []
    share = server._end.server
    server_id = share.server_id
    thread = serve_in_thread(server, 40, errors, make_batch=image_batch)
    seen = []  # segments (the probe aside) in /dev/shm after each batch
    for i, batch in enumerate(consumer):
        assert (batch["image"] == i % 251).all() and batch["id"].tolist() == list(range(8 * i, 8 * i + 8))
        batch["image"][...] = 0  # ours to change: the next batches are not touched
        seen.append(len([n for n in segments_of(server_id) if not n.endswith("-probe")]))
    assert len(seen) == 40
    assert consumer._end.joiner.links[0].shm_prefix == f"tensorcom-{server_id}-"  # references, not frames
    assert 1 < max(seen) <= 16 + 2 + 1  # reused: at most replay + credit (+1 read ahead)
    consumer.close()
    thread.join(timeout=30)
    assert not thread.is_alive() and errors == []
    assert segments_of(server_id) == []  # every segment unlinked when the server ended


def test_consumers_with_and_without_the_handoff_get_the_same_batches(free_port, monkeypatch):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}", min_consumers=3)
    local = Connection(f"zjoin://{url}")
    refusing = Connection(f"zjoin://{url}", shm=False)
    monkeypatch.setenv("TENSORCOM_SHM", "0")
    switched_off = Connection(f"zjoin://{url}")
    monkeypatch.delenv("TENSORCOM_SHM")
    errors: list = []
    thread = serve_in_thread(server, 12, errors, epochs=2, make_batch=image_batch)
    results: dict = {}

    def consume(name, conn):
        results[name] = [check_batches(conn, 12, 12 * epoch) for epoch in range(2)]

    threads = [threading.Thread(target=consume, args=item) for item in
               {"local": local, "refusing": refusing, "off": switched_off}.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == {"local": [12, 12], "refusing": [12, 12], "off": [12, 12]}
    assert local._end.joiner.links[0].shm_prefix is not None
    assert refusing._end.joiner.links[0].shm_prefix is None and switched_off._end.joiner.links[0].shm_prefix is None
    thread.join(timeout=30)
    assert errors == []
    for conn in (local, refusing, switched_off):
        conn.close()


def raw_client(url: str, join: dict) -> zmq.Socket:
    """A consumer written from docs/protocol.md alone: a DEALER that joins with `join`'s fields."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    sock.rcvtimeo = 20_000
    sock.connect(f"tcp://{url}")
    sock.send(control.encode("join", name="raw", credit=4, **join))
    return sock


@pytest.mark.parametrize("answer", [None, False, True])
def test_a_client_that_asks_is_offered_the_probe_and_gets_references_only_after_saying_yes(free_port, answer):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}")
    sock = raw_client(url, {"shm": True})
    welcome = control.decode(sock.recv())
    offer = welcome["shm"]
    probe = Path(f"/dev/shm/{offer['name']}").read_bytes()  # what §7.8 says lies there
    assert probe[: len(MAGIC) + 16] == MAGIC + bytes.fromhex(offer["token"])
    if answer is not None:
        sock.send(control.encode("shm", ok=answer))
        # the answer is read before the first batch is there to send: the probe goes once every offer is answered
        assert soon(lambda: not Path(f"/dev/shm/{offer['name']}").exists())
    errors: list = []
    thread = serve_in_thread(server, 3, errors, make_batch=image_batch)
    for n in range(1, 4):
        frames = sock.recv_multipart()
        meta = control.decode(frames[0])
        if answer is True:  # a reference: no frames; the segment holds the wire message at the offsets
            assert len(frames) == 1 and meta["shm"]["seg"].startswith(offer["name"][: -len("probe")])
            data = Path(f"/dev/shm/{meta['shm']['seg']}").read_bytes()
            assert data[:8] == MAGIC and struct.unpack("<Q", data[8:16])[0] == meta["shm"]["gen"]
            frames = [data[offset: offset + size] for offset, size in meta["shm"]["frames"]]
        else:
            assert "shm" not in meta and len(frames) > 1
            frames = frames[1:]
        batch = wire.decode_message(frames).batch
        assert batch["id"].tolist() == list(range(8 * (n - 1), 8 * n))
        sock.send(control.encode("ack", upto=n))
    end = control.decode(sock.recv())
    assert end["k"] == "end"
    sock.send(control.encode("ack", upto=end["n"]))  # the bye waits for the end's acknowledgement too
    assert control.decode(sock.recv())["k"] == "bye"  # everything acknowledged: the server closed
    thread.join(timeout=30)
    assert not thread.is_alive() and errors == []
    sock.close()


def test_small_batches_go_as_frames_even_to_a_consumer_that_reads_shared_memory(free_port):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}")
    consumer = Connection(f"zjoin://{url}")
    share = server._end.server
    server.send({"id": np.arange(4)}, allow64=True)
    assert consumer.recv()["id"].tolist() == [0, 1, 2, 3]  # the welcome was read: the consumer said yes
    assert soon(lambda: share.arena.peers)  # its answer reached the server before the next batch
    server.send(image_batch(0))
    assert consumer.recv()["id"].tolist() == list(range(8))
    assert consumer._end.joiner.links[0].shm_prefix is not None
    assert len(share.arena._placed) == 1  # only the batch of MIN_BYTES or more was placed
    consumer.close()
    server.close(linger=10)


def test_a_server_whose_consumers_never_ask_makes_no_shared_memory(free_port):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}")
    consumer = Connection(f"zjoin://{url}", shm=False)
    share = server._end.server
    server.send(image_batch(0))
    assert consumer.recv()["id"].tolist() == list(range(8))
    assert share.arena is None and segments_of(share.server_id) == []
    consumer.close()
    server.close(linger=10)


def test_the_offer_is_refused_when_the_probe_does_not_hold_the_token():
    arena = Arena("t0ken0test01")
    try:
        offer = arena.offer()
        assert Reader.accepts(offer) == "tensorcom-t0ken0test01-"
        assert Reader.accepts({**offer, "token": "00" * 16}) is None
        assert Reader.accepts({**offer, "name": "tensorcom-nosuchserver-probe"}) is None
        assert Reader.accepts({**offer, "name": "someone-elses-segment"}) is None
        assert Reader.accepts("not a map") is None
    finally:
        arena.close()
    assert segments_of("t0ken0test01") == []


class _Item:
    """Stands for a sharing book's item: the arena needs its frames, their size and its lifetime."""

    def __init__(self, frames: list):
        self.frames, self.nbytes = frames, sum(len(f) for f in frames)


def test_bad_references_are_decode_errors_and_a_reused_segment_is_never_read_torn():
    arena = Arena("badrefs00001")
    reader = Reader()
    try:
        arena.accept("peer", True)
        item = _Item([b"A" * 100, b"B" * MIN_BYTES])
        ref = arena.ref("peer", item)
        prefix = "tensorcom-badrefs00001-"
        assert [bytes(v) for v in reader.read(ref, prefix)] == [b"A" * 100, b"B" * MIN_BYTES]
        for bad, match in [({**ref, "frames": [[0, 10]]}, "outside"),
                           ({**ref, "frames": [[HEADER, 1 << 40]]}, "outside"),
                           ({**ref, "frames": [[HEADER, -1]]}, "malformed"),
                           ({**ref, "gen": "1"}, "malformed"),
                           ({**ref, "seg": "tensorcom-other-0"}, "not the server's"),
                           ({**ref, "seg": prefix + "999"}, "cannot open"),
                           ({**ref, "gen": ref["gen"] + 1}, "no longer holds")]:
            with pytest.raises(DecodeError, match=match):
                reader.read(bad, prefix)
        del item  # the batch is no longer needed: its segment is reused for the next one
        again = _Item([b"C" * MIN_BYTES])
        reused = arena.ref("peer", again)
        assert reused["seg"] == ref["seg"] and reused["gen"] != ref["gen"]
        with pytest.raises(DecodeError, match="no longer holds"):
            reader.read(ref, prefix)  # the old reference: an error, never C's bytes as A's
        assert [bytes(v) for v in reader.read(reused, prefix)] == [b"C" * MIN_BYTES]
    finally:
        reader.close()
        arena.close()


def test_batches_of_growing_sizes_leave_at_most_max_free_segments_behind():
    arena = Arena("growing00001")
    try:
        arena.accept("peer", True)
        for i in range(3 * MAX_FREE):  # each batch 64 KiB larger than the last: no free segment fits it
            assert arena.ref("peer", _Item([b"x" * (MIN_BYTES * (i + 1))])) is not None  # released at once
        assert len(arena._free) <= MAX_FREE and len(segments_of("growing00001")) <= MAX_FREE + 1  # + the probe
    finally:
        arena.close()


def test_a_consumer_process_that_exits_leaves_the_servers_segments_alone(free_port, popen, tmp_path):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}", min_consumers=1)
    errors: list = []
    share = server._end.server
    thread = serve_in_thread(server, 10, errors, epochs=3, make_batch=image_batch)
    server_id = share.server_id
    peer = os.path.join(os.path.dirname(__file__), "share_peer.py")
    first = popen.python(peer, "consume", f"zjoin://{url}", "--out", str(tmp_path / "a.jsonl"), "--passes", "1")
    assert first.wait(timeout=60) == 0
    assert any(not name.endswith("-probe") for name in segments_of(server_id))  # its exit unlinked nothing
    late = Connection(f"zjoin://{url}")
    late.recv()
    assert late._end.joiner.links[0].shm_prefix is not None  # a later consumer is offered a probe too
    late.close()
    share.abort()
    thread.join(timeout=30)
    assert segments_of(server_id) == []


@pytest.mark.parametrize("address, expected", [("zjoin://127.0.0.1:7880", True), ("zjoin://localhost:7880", True),
                                               ("zjoin://10.1.2.3:7880", False), ("zjoin+ipc:///tmp/x", True)])
def test_consumers_ask_for_the_handoff_only_from_servers_on_this_host_unless_told(address, expected):
    endpoint = parse(address)
    assert wants_handoff(None, endpoint) is expected
    assert wants_handoff(True, endpoint) is True and wants_handoff(False, endpoint) is False


def test_a_killed_servers_segments_are_unlinked_by_its_resource_tracker(free_port, popen):
    url = f"127.0.0.1:{free_port()}"
    peer = os.path.join(os.path.dirname(__file__), "share_peer.py")
    server = popen.python(peer, "serve", f"zshare://{url}", "--batches", "100", "--every", "0.05",
                          "--pad", str(2 * MIN_BYTES))
    consumer = Connection(f"zjoin://{url}", credit=2)
    consumer.recv()
    server_id = consumer._end.joiner.links[0].server
    for _ in range(20):  # the first batches may go as frames, before the server has the consumer's answer
        if segments_of(server_id):
            break
        consumer.recv()
    assert consumer._end.joiner.links[0].shm_prefix and segments_of(server_id)  # batches came through shared memory
    server.kill()
    server.wait(timeout=10)
    deadline = time.monotonic() + 20
    while segments_of(server_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert segments_of(server_id) == []
    consumer.close()
