"""The test proxy (tests/faults/tcp_proxy.py) with plain sockets: it forwards both ways, counts, resets
with FIN or RST, stalls without closing, resumes; and a raw pyzmq PUSH/PULL pair reconnects through a
reset and loses nothing that was sent after it."""

import socket

import pytest

from faults.tcp_proxy import TcpProxy

pytestmark = pytest.mark.net


@pytest.fixture
def echo_target():
    """A listening socket on 127.0.0.1 (the proxy's target); the test accepts from it itself."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5)
    yield server
    server.close()


def connected(proxy: TcpProxy, target: socket.socket) -> tuple[socket.socket, socket.socket]:
    """(client, server side) of one connection through the proxy, both with 5 s timeouts."""
    client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    far, _ = target.accept()
    far.settimeout(5)
    return client, far


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, f"connection ended after {len(data)} of {n} bytes"
        data += chunk
    return data


def test_forwards_both_ways_and_counts(echo_target):
    with TcpProxy(echo_target.getsockname()[1]) as proxy:
        client, far = connected(proxy, echo_target)
        assert proxy.wait_for_connections(1) == 1
        payload = bytes(range(256)) * 4000  # more than one read and than the socket buffers
        client.sendall(payload[:1000])
        assert recv_exactly(far, 1000) == payload[:1000]
        far.sendall(b"pong")
        assert recv_exactly(client, 4) == b"pong"
        assert proxy.wait_for_bytes(1004) >= 1004
        client.sendall(payload)
        assert recv_exactly(far, len(payload)) == payload
        assert proxy.wait_for_bytes(1004 + len(payload)) == 1004 + len(payload)  # counted after the send
        client.close()
        assert far.recv(1) == b""  # the client's FIN is passed on
        far.close()


def test_wait_raises_when_nothing_comes(echo_target):
    with TcpProxy(echo_target.getsockname()[1]) as proxy:
        with pytest.raises(TimeoutError, match="0 connections accepted"):
            proxy.wait_for_connections(1, timeout=0.2)
        with pytest.raises(TimeoutError, match="0 bytes forwarded"):
            proxy.wait_for_bytes(1, timeout=0.2)


@pytest.mark.parametrize("rst", [False, True])
def test_reset_closes_both_sides_once_and_accepts_again(echo_target, rst):
    with TcpProxy(echo_target.getsockname()[1]) as proxy:
        client, far = connected(proxy, echo_target)
        client.sendall(b"a")
        assert recv_exactly(far, 1) == b"a"
        proxy.reset(rst=rst)
        for sock in (client, far):
            if rst:
                with pytest.raises(ConnectionResetError):
                    sock.recv(1)
            else:
                assert sock.recv(1) == b""
            sock.close()
        client, far = connected(proxy, echo_target)  # accepted again at once, and forwarded
        client.sendall(b"b")
        assert recv_exactly(far, 1) == b"b"
        assert proxy.connections == 2
        client.close()
        far.close()


def test_stall_holds_everything_without_closing_and_resume_delivers_it(echo_target):
    with TcpProxy(echo_target.getsockname()[1]) as proxy:
        client, far = connected(proxy, echo_target)
        proxy.stall()
        client.sendall(b"held")
        far.settimeout(0.3)
        with pytest.raises(socket.timeout):  # not forwarded, and not closed either (no b"")
            far.recv(4)
        second = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)  # waits in the backlog
        assert proxy.connections == 1 and proxy.bytes_forwarded == 0
        proxy.resume()
        far.settimeout(5)
        assert recv_exactly(far, 4) == b"held"
        assert proxy.wait_for_connections(2) == 2
        for sock in (client, far, second):
            sock.close()


def test_zmq_push_pull_reconnects_through_a_reset():
    zmq = pytest.importorskip("zmq")
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    pull.rcvtimeo = 5000
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = context.socket(zmq.PUSH)
    push.reconnect_ivl = 20
    try:
        with TcpProxy(port) as proxy:
            push.connect(f"tcp://127.0.0.1:{proxy.port}")
            push.send(b"before")
            assert pull.recv() == b"before"
            proxy.reset()
            proxy.wait_for_connections(2)  # ZeroMQ reconnected by itself
            for i in range(100):
                push.send(b"%d" % i)
            assert [pull.recv() for _ in range(100)] == [b"%d" % i for i in range(100)]
    finally:
        push.close(linger=0)
        pull.close(linger=0)
        context.term()
