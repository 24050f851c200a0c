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


def watch_with(sender="a", liveness=2.0):
    """A watch that tracks `sender`, whose link came up at t=0.5."""
    watch = PeerWatch(liveness)
    watch.linked(sender, True, 0.5)
    return watch


def test_rule_1_a_waited_on_sender_is_lost_only_after_the_liveness_window():
    watch = watch_with()
    watch.linked("a", False, 1.0)  # its link dropped (a reset, a kill, a heartbeat timeout)
    assert watch.lost(["a"], set(), 2.9) is None  # unreachable for 1.9 s < 2 s: not gone
    senders, why = watch.lost(["a"], set(), 3.0)
    assert senders == ["a"] and "unreachable for 2.0 s" in why


def test_failed_reconnect_attempts_are_no_sign_of_life():
    watch = watch_with()
    watch.linked("a", False, 1.0)
    for attempt in range(1, 20):
        watch.linked("a", False, 1.0 + attempt / 10)  # ZeroMQ retries every 100 ms, refused each time
    assert watch.lost(["a"], set(), 3.0) is not None


def test_a_link_that_comes_back_within_the_window_is_no_departure():
    watch = watch_with()
    watch.linked("a", False, 1.0)
    watch.linked("a", True, 2.5)  # ZeroMQ reconnected: the session goes on
    assert watch.lost(["a"], set(), 100.0) is None


def test_rule_1_needs_every_waited_on_sender_gone():
    watch = watch_with("a")
    watch.linked("b", True, 0.5)
    watch.linked("a", False, 1.0)
    assert watch.lost(["a", "b"], set(), 10.0) is None
    watch.linked("b", False, 9.0)
    assert watch.lost(["a", "b"], set(), 10.0) is None and watch.lost(["a", "b"], set(), 11.0)[0] == ["a", "b"]


def test_data_heard_counts_as_reachable():
    watch = watch_with()
    watch.linked("a", False, 1.0)
    watch.heard("a", 2.5)  # its batches still arrive (the link is what dropped)
    assert watch.lost(["a"], set(), 4.4) is None and watch.lost(["a"], set(), 4.5) is not None


def test_untracked_senders_are_waited_for():
    """A sender without a session link (tensorcom 0.1, a foreign sender) is never declared gone."""
    watch = PeerWatch(2.0)
    watch.heard("foreign", 0.0)
    assert watch.lost(["foreign"], set(), 1000.0) is None and watch.lost([], set(), 1000.0) is None


def test_rule_2_nobody_left_who_could_end_the_pass():
    watch = watch_with()
    assert watch.lost([], set(), 5.0) is None  # its link is up: it may send the next epoch
    watch.linked("a", False, 6.0)
    assert watch.lost([], set(), 7.9) is None
    senders, why = watch.lost([], set(), 8.0)
    assert senders == ["a"] and "no sender has been reachable" in why


def test_rule_2_senders_that_ended_the_pass_cannot_end_it():
    watch = watch_with()
    assert watch.lost([], {"a"}, 1.0) is None  # the clock starts
    assert watch.lost([], {"a"}, 3.4) is not None


def test_a_receiver_that_never_heard_a_sender_waits():
    assert PeerWatch(1.0).lost([], set(), 100.0) is None


def test_after_peer_lost_the_clock_starts_again_and_a_returning_sender_goes_on():
    watch = watch_with()
    watch.linked("a", False, 1.0)
    assert watch.lost([], set(), 3.0) is not None
    watch.excused(3.0)
    assert watch.lost([], set(), 4.9) is None and watch.lost([], set(), 5.0) is not None
    watch.excused(5.0)
    watch.linked("a", True, 5.5)
    assert watch.lost(["a"], set(), 50.0) is None


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
    """Plain senders set no ZMTP heartbeats (a timeout or TTL can abort libzmq under a paused reader,
    and unread PONGs make a close a reset); plain receivers only keep TCP alive; session links and sharing sockets
    derive everything from the liveness (defaults: 0, -1, 0, -1)."""
    plain_sender = heartbeat_options(lambda s: sockets.stream_options(s, sends=True, liveness=2))
    assert plain_sender == (0, -1, 0, -1)
    assert heartbeat_options(lambda s: sockets.link_heartbeats(s, 10), zmq.ROUTER)[:3] == (500, -1, 0)
    assert heartbeat_options(lambda s: sockets.link_heartbeats(s, 2), zmq.ROUTER)[:3] == (400, -1, 0)
    assert heartbeat_options(lambda s: sockets.stream_options(s, sends=True, liveness=None))[:3] == (0, -1, 0)
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
    """SIGKILL mid-epoch: PeerLost once it stayed unreachable for the liveness window (after what was
    queued), naming the URL and the sender; a restarted server is a new sender whose 3 epochs arrive
    as 3 passes."""
    where = f"127.0.0.1:{free_port()}"
    with Connection(f"zpull://{where}", liveness=2, timeout=30) as receiver:
        server = start_server(popen, f"zpush://{where}", "--batches", "200", "--every", "0.01")
        got, delay, error = receive_until_lost(receiver, 10, lambda: os.kill(server.pid, signal.SIGKILL))
        assert delay < 2 + 2 and 10 <= len(got) < 200 and all(e == 0 for e, _ in got)  # within liveness + 2 s
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
    """zsub with default arguments (liveness 10 s, no timeout): PeerLost within liveness + 2 s of the kill."""
    port = free_port()
    server = start_server(popen, f"zpub://127.0.0.1:{port}", "--batches", "100000", "--every", "0.01")
    with Connection(f"zsub://127.0.0.1:{port}") as receiver:
        got, delay, error = receive_until_lost(receiver, 5, lambda: os.kill(server.pid, signal.SIGKILL))
    assert delay < 10 + 2 and len(got) >= 5 and "unreachable for" in str(error)


@pytest.mark.net
@pytest.mark.procs
def test_a_server_paused_past_the_liveness_loses_nothing(popen, free_port):
    """SIGSTOP for three times the liveness while streaming, then SIGCONT: a paused peer is no
    departure (its kernel still answers): no PeerLost, every batch once and in order."""
    port = free_port()
    server = start_server(popen, f"zpush://127.0.0.1:{port}", "--batches", "300", "--every", "0.005")
    got = []
    try:
        with Connection(f"zpull://127.0.0.1:{port}", liveness=2, timeout=30) as receiver:
            for batch in receiver:
                got.append(batch[1].tolist())
                if len(got) == 20:
                    os.kill(server.pid, signal.SIGSTOP)
                    time.sleep(6)  # the fault itself: the pause lasts three liveness windows
                    os.kill(server.pid, signal.SIGCONT)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert got == [[0, i] for i in range(300)]


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
        with pytest.raises(PeerLost, match="no sender has been reachable"):
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
    assert delay < 2 + 2 and f"zpull://127.0.0.1:{port}" in str(error)  # by rule 1, or rule 2 between epochs
