"""Socket monitors (`_sockets.open_monitor`): a monitor nobody reads never holds up ZeroMQ's I/O
thread, and closing one in any order never does either. What could freeze runs in a subprocess with
a timeout; the subprocess prints what it saw."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.net

# Unread monitors of sockets that retry a dead port every millisecond produce thousands of events
# (one EVENT_CLOSED per attempt); a clock socket's monitor, read, counts the attempts. A PUSH/PULL
# pair of the same context (one I/O thread) must still work afterwards. With a blocking monitor,
# the I/O thread stops after 1000 unread events, the clock stops, and the script says "frozen".
UNREAD_MONITORS = textwrap.dedent("""
    import os, socket, sys
    import zmq
    from tensorcom.transport import _sockets

    def dead_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def retrying(ctx, port):
        sock = ctx.socket(zmq.PUSH)
        sock.linger, sock.reconnect_ivl = 0, 1
        return sock

    make = sys.argv[1]
    ctx = _sockets.acquire_context()
    port = dead_port()
    unread = [retrying(ctx, port) for _ in range(4)]
    monitors = [_sockets.open_monitor(s) if make == "open_monitor" else s.get_monitor_socket() for s in unread]
    clock = retrying(ctx, port)
    ticks = _sockets.open_monitor(clock)
    for sock in unread + [clock]:
        sock.connect(f"tcp://127.0.0.1:{port}")
    seen = 0
    while seen < 3000:
        events = _sockets.monitor_events(ticks) if ticks.poll(5000) else []
        if not events:
            print("frozen", seen, flush=True)
            os._exit(3)
        seen += len(events)
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.rcvtimeo = push.sndtimeo = 5000
    pull.linger = push.linger = 0
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push.connect(f"tcp://127.0.0.1:{port}")
    try:
        push.send(b"still here")
        print("received", pull.recv().decode(), flush=True)
    except zmq.Again:
        print("frozen", seen, flush=True)
        os._exit(3)
    queued = len(_sockets.monitor_events(monitors[0]))  # only the first 1000 with a blocking monitor
    print("queued", queued, flush=True)
    for sock in [pull, push, ticks, clock, *monitors, *unread]:  # monitors before their sockets
        sock.close(linger=0)
    _sockets.release_context()
    print("released", flush=True)
""")


def run_script(script: str, *args: str, timeout: float = 60) -> str:
    """The stdout of `python -c script args`, killed after `timeout` s (whose output then says so)."""
    try:
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return f"{exc.stdout or ''}\ntimed out"
    return done.stdout + done.stderr


def test_an_unread_monitor_never_blocks_the_io_thread():
    out = run_script(UNREAD_MONITORS, "open_monitor")
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert "received" in lines, out
    assert lines["received"] == "still here"
    assert int(lines["queued"]) > 1000, out  # more than libzmq's default monitor HWM waited unread
    assert "released" in out, out


def test_pyzmqs_own_monitor_would_freeze_here():
    """The same script with pyzmq's get_monitor_socket: the I/O thread stops (what the test above
    would see if open_monitor blocked)."""
    out = run_script(UNREAD_MONITORS, "get_monitor_socket")
    assert "frozen" in out, out


CLOSE_ORDERS = textwrap.dedent("""
    import gc, sys
    import zmq
    from tensorcom.transport import _sockets

    ctx = _sockets.acquire_context()
    for order in ("monitor first", "socket first", "dropped", "disabled first"):
        for _ in range(50):
            pull = ctx.socket(zmq.PULL)
            pull.linger = 0
            monitor = _sockets.open_monitor(pull)
            port = pull.bind_to_random_port("tcp://127.0.0.1")
            push = ctx.socket(zmq.PUSH)
            push.linger = 0
            push.connect(f"tcp://127.0.0.1:{port}")
            push.send(b"x")
            assert pull.recv() == b"x"
            if order == "monitor first":
                monitor.close()
                pull.close()
            elif order == "socket first":
                pull.close()
                monitor.close()
            elif order == "disabled first":
                pull.disable_monitor()
                pull.close()
                monitor.close()
            else:
                del pull, monitor
                gc.collect()
            push.close()
        print(order, "ok", flush=True)
    _sockets.release_context()
    print("released", flush=True)
""")


def test_monitors_close_safely_in_any_order():
    """A monitor closed before its socket, after it (parked until the socket stops reporting), or
    both collected: 50 times each, then the shared context terminates (nothing left open)."""
    out = run_script(CLOSE_ORDERS, timeout=90)
    for order in ("monitor first", "socket first", "dropped", "disabled first"):
        assert f"{order} ok" in out, out
    assert "released" in out, out
