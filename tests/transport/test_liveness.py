"""Liveness on plain-scheme streams: the PeerWatch rules without sockets, the heartbeat options of every
kind of socket, then real server processes that are killed, stopped, restarted, or idle while a
receiver waits on them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from tensorcom import Connection
from tensorcom.errors import PeerLost, RecvTimeout
from tensorcom.transport import _sockets as sockets
from tensorcom.transport.liveness import PeerWatch

PEER = str(Path(__file__).with_name("stream_peer.py"))
BIN = Path(sys.executable).parent


# ---- the rules, without sockets -------------------------------------------------------------------


def watch_with(sender="a", fd=7, liveness=2.0):
    watch = PeerWatch(liveness, grace=1.0)
    watch.opened(fd, 0.0)
    watch.heard(sender, fd, 0.5)
    return watch


def test_rule_1_a_waited_on_sender_whose_connection_closed_is_lost_at_once():
    watch = watch_with()
    assert watch.lost(["a"], set(), 1.0, {}, 0.1) is None
    watch.closed(7, 1.0)
    senders, why = watch.lost(["a"], set(), 1.0, {}, 0.1)
    assert senders == ["a"] and "connection closed" in why
    watch.forget(["a"], 1.0)
    assert watch.lost([], set(), 2.0, {}, 0.1) is None  # the clock of rule 2 starts again


def test_rule_1_needs_every_waited_on_sender_gone():
    watch = watch_with()
    watch.opened(8, 0.0)
    watch.heard("b", 8, 0.5)
    watch.closed(7, 1.0)
    assert watch.lost(["a", "b"], set(), 1.0, {}, 0.1) is None
    assert watch.lost(["c"], set(), 1.0, {}, 0.1) is None  # never placed on a connection: not judged
    watch.closed(8, 1.2)
    assert watch.lost(["a", "b"], set(), 1.2, {}, 0.1)[0] == ["a", "b"]


def test_a_quiet_connection_counts_only_after_the_grace_and_the_liveness():
    watch = watch_with()
    assert watch.lost(["a"], set(), 9.0, {7: 5.0}, 0.5) is None  # waited less than the grace: our queue may be full
    assert watch.lost(["a"], set(), 9.0, {7: 1.5}, 3.0) is None  # heartbeats arrive
    assert watch.lost(["a"], set(), 9.0, {7: None}, 3.0) is None  # unknown (not TCP, not Linux)
    senders, why = watch.lost(["a"], set(), 9.0, {7: 2.5}, 3.0)
    assert senders == ["a"] and "nothing received from it for 2.5 s" in why


def test_a_new_unplaced_connection_does_not_stand_for_a_lost_sender():
    watch = watch_with()
    watch.closed(7, 1.0)
    watch.opened(9, 1.0)  # a reconnect, or a restarted server: unknown until it sends
    assert watch.lost(["a"], set(), 1.1, {}, 0.1)[0] == ["a"]


def test_rule_2_nobody_left_who_could_end_the_pass():
    watch = watch_with()
    assert watch.lost([], set(), 1.0, {}, 0.1) is None
    assert watch.lost([], {"a"}, 1.5, {}, 0.1) is None  # a ended the pass: its connection does not count ...
    assert watch.lost([], {"a"}, 2.9, {}, 0.1) is None
    senders, why = watch.lost([], {"a"}, 3.1, {}, 0.1)  # ... for `liveness` seconds (since 1.0)
    assert senders == [] and "no sender has been connected" in why
    watch.forget([], 2.6)
    watch.opened(8, 3.0)  # an unplaced connection may be a sender that will end the pass
    assert watch.lost([], {"a"}, 9.0, {}, 0.1) is None


def test_rule_2_after_the_last_connection_closed():
    watch = watch_with()
    watch.closed(7, 4.0)
    assert watch.lost([], set(), 5.9, {}, 0.1) is None
    senders, _ = watch.lost([], set(), 6.1, {}, 0.1)
    assert senders == ["a"]


def test_a_receiver_that_never_heard_a_sender_waits():
    watch = PeerWatch(2.0)
    watch.opened(7, 0.0)
    watch.closed(7, 0.1)  # a 0.1 server's connection, or nothing identified on it
    assert watch.lost([], set(), 100.0, {}, 50.0) is None


def test_a_reused_descriptor_is_a_new_connection():
    watch = watch_with()
    watch.opened(7, 1.0)  # the close event of the old connection was missed
    assert watch.where["a"] == set() and watch.lost(["a"], set(), 1.0, {}, 0.1)[0] == ["a"]


# ---- the socket options (no connection) ---------------------------------------------------------


def heartbeat_options(set_options, kind=zmq.PUSH):
    """(HEARTBEAT_IVL, HEARTBEAT_TIMEOUT, HEARTBEAT_TTL, TCP_KEEPALIVE) of a fresh socket after set_options(sock)."""
    context = zmq.Context()
    sock = context.socket(kind)
    try:
        set_options(sock)
        return tuple(sock.getsockopt(option) for option in
                     (zmq.HEARTBEAT_IVL, zmq.HEARTBEAT_TIMEOUT, zmq.HEARTBEAT_TTL, zmq.TCP_KEEPALIVE))
    finally:
        sock.close(linger=0)
        context.term()


def test_heartbeat_options_of_each_kind_of_socket():
    """Plain senders PING every HEARTBEAT_IVL with the liveness as TTL and never time out a slow reader
    (even with liveness off); plain receivers only keep TCP alive; sharing sockets derive everything
    from the liveness (defaults: 0, -1, 0, -1)."""
    plain_sender = heartbeat_options(lambda s: sockets.stream_options(s, sends=True, liveness=2))
    assert plain_sender == (int(sockets.HEARTBEAT_IVL * 1000), 0, 2000, -1)
    assert heartbeat_options(lambda s: sockets.stream_options(s, sends=True, liveness=None))[:3] == (500, 0, 0)
    assert heartbeat_options(lambda s: sockets.stream_options(s, sends=False, liveness=2), zmq.PULL) == (0, -1, 0, 1)
    assert heartbeat_options(lambda s: sockets.set_heartbeats(s, 10), zmq.DEALER) == (2000, 5000, 10000, -1)
    assert heartbeat_options(lambda s: sockets.set_heartbeats(s, 0.01), zmq.DEALER)[:3] == (10, 20, 100)
    assert heartbeat_options(lambda s: sockets.set_heartbeats(s, None), zmq.DEALER) == (0, -1, 0, -1)
    with pytest.raises(ValueError, match="liveness must be a positive number"):
        heartbeat_options(lambda s: sockets.set_heartbeats(s, 0))


# ---- real processes --------------------------------------------------------------------------------


def start_server(popen, url, *args):
    """A stream_peer.py server; returns the process once it says it is connected."""
    proc = popen.python(PEER, "serve", url, *args, stdout=subprocess.PIPE, text=True)
    assert "ready" in json.loads(proc.stdout.readline())
    return proc


def lines(proc):
    """The JSON lines a stream_peer.py process printed (after it ended)."""
    return [json.loads(line) for line in proc.stdout.read().splitlines()]


def receive_until_lost(receiver, kill_after, kill):
    """Iterate until PeerLost, calling kill() after `kill_after` batches; (batches, seconds from the
    kill to PeerLost, the error)."""
    got, killed = [], None
    with pytest.raises(PeerLost) as info:
        while True:
            for batch in receiver:
                got.append(batch[1].tolist())
                if len(got) == kill_after:
                    kill()
                    killed = time.monotonic()
    return got, time.monotonic() - killed, info.value


@pytest.mark.net
@pytest.mark.procs
def test_killed_server_then_a_restarted_one_epochs_end_as_before(popen, free_port):
    """SIGKILL mid-epoch: PeerLost at once (after what was queued), naming the URL and the sender; a
    restarted server is a new sender whose 3 epochs arrive as 3 passes."""
    where = f"127.0.0.1:{free_port()}"
    with Connection(f"zpull://{where}", liveness=2, timeout=30) as receiver:
        server = start_server(popen, f"zpush://{where}", "--batches", "200", "--every", "0.01")
        got, delay, error = receive_until_lost(receiver, 10, lambda: os.kill(server.pid, signal.SIGKILL))
        assert delay < 1.5 and 10 <= len(got) < 200 and all(e == 0 for e, _ in got)
        assert f"zpull://{where}" in str(error) and len(error.senders) == 1
        assert f":{server.pid}:" in error.senders[0] and error.senders[0] in str(error)
        restarted = start_server(popen, f"zpush://{where}", "--epochs", "3", "--batches", "40")
        passes = [[batch[1].tolist() for batch in receiver] for _ in range(3)]
    assert [[e for e, _ in p] for p in passes] == [[k] * 40 for k in range(3)]
    assert [[i for _, i in p] for p in passes] == [list(range(40))] * 3
    assert restarted.wait(timeout=10) == 0 and lines(restarted)[-1] == {"closed": True}


@pytest.mark.net
@pytest.mark.procs
def test_default_arguments_subscriber_of_a_killed_publisher(popen, free_port):
    """zsub with default arguments (liveness 10 s, no timeout): PeerLost soon after the kill."""
    port = free_port()
    server = start_server(popen, f"zpub://127.0.0.1:{port}", "--batches", "100000", "--every", "0.01")
    with Connection(f"zsub://127.0.0.1:{port}") as receiver:
        got, delay, error = receive_until_lost(receiver, 5, lambda: os.kill(server.pid, signal.SIGKILL))
    assert delay < 2 and len(got) >= 5 and "connection closed" in str(error)


@pytest.mark.net
@pytest.mark.procs
def test_stopped_server_is_lost_after_the_liveness(popen, free_port):
    """SIGSTOP (a host that vanished: the kernel still answers, the process does not) while streaming:
    PeerLost once nothing, not even a heartbeat, arrived for `liveness` seconds."""
    if not hasattr(__import__("socket"), "TCP_INFO"):
        pytest.skip("quiet connections are known from TCP_INFO (Linux)")
    port = free_port()
    server = start_server(popen, f"zpush://127.0.0.1:{port}", "--batches", "100000", "--every", "0.005")
    try:
        with Connection(f"zpull://127.0.0.1:{port}", liveness=2, timeout=30) as receiver:
            _, delay, error = receive_until_lost(receiver, 20, lambda: os.kill(server.pid, signal.SIGSTOP))
    finally:
        os.kill(server.pid, signal.SIGKILL)
    assert 1.5 < delay < 5 and "nothing received from it" in str(error)


@pytest.mark.net
@pytest.mark.procs
def test_sender_idle_three_times_the_liveness_is_not_lost(popen, free_port):
    """A server whose Python code does not send (busy elsewhere) for 6 s, with liveness=2: its ZeroMQ
    keeps answering, the pass ends normally."""
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", liveness=2, timeout=30) as receiver:
        server = start_server(popen, f"zpush://127.0.0.1:{port}", "--batches", "3", "--idle", "6")
        start = time.monotonic()
        got = [batch[1].tolist() for batch in receiver]
        assert time.monotonic() - start > 5.5
    assert got == [[0, 0], [0, 1], [0, 2]] and server.wait(timeout=10) == 0


@pytest.mark.net
def test_a_receiver_that_never_had_a_sender_times_out_rather_than_peer_lost(free_port):
    with Connection(f"zpull://127.0.0.1:{free_port()}", liveness=1, timeout=2.5) as receiver, \
            pytest.raises(RecvTimeout):
        receiver.recv()


@pytest.mark.net
def test_sender_that_closes_between_epochs_then_nobody_comes(free_port):
    """Rule 2 in one process: the pass after a sender that left has nobody to end it."""
    where = f"127.0.0.1:{free_port()}"
    with Connection(f"zpull://{where}", liveness=1, timeout=10) as receiver:
        with Connection(f"zpush://{where}") as sender:
            sender.serve([[np.zeros(3, np.uint8)]] * 2)
            assert len(list(receiver)) == 2
        start = time.monotonic()
        with pytest.raises(PeerLost, match="no sender has been connected"):
            list(receiver)
        assert 0.9 < time.monotonic() - start < 3


def imagenet_tree(root: Path) -> Path:
    """DIR/train/<class>/*.jpg: 2 classes of 4 small JPEGs."""
    import simplejpeg

    rng = np.random.default_rng(0)
    for label in range(2):
        folder = root / "train" / f"class{label}"
        folder.mkdir(parents=True)
        for i in range(4):
            image = rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)
            (folder / f"{i}.jpg").write_bytes(simplejpeg.encode_jpeg(image, quality=80))
    return root


@pytest.mark.net
@pytest.mark.procs
def test_killed_serve_imagenet_dir(popen, free_port, tmp_path):
    """tensorcom.serve through its tool: SIGKILL the whole server (its serving worker sends)."""
    pytest.importorskip("simplejpeg")
    script = BIN / "serve-imagenet-dir"
    if not script.exists():
        pytest.skip("serve-imagenet-dir is not installed in this environment")
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", liveness=2, timeout=60) as receiver:
        server = popen.start([str(script), "-d", str(imagenet_tree(tmp_path)), "-b", "2", "--size", "16",
                              "-r", "0", f"zpush://127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
        _, delay, error = receive_until_lost(receiver, 6, lambda: os.killpg(server.pid, signal.SIGKILL))
    assert delay < 4 and f"zpull://127.0.0.1:{port}" in str(error)  # at once, or by rule 2 between epochs
