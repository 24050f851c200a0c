"""The fault harness itself (tests/faults/netns.py), with plain sockets (probes.py) between namespaces:
a partition blocks a TCP echo and healing resumes it, a reset is an ECONNRESET, loss drops part of a
UDP burst, tbf bounds the bytes per second, the relay delays, a vanished host sends no FIN, a stopped
process stalls its peer, and closing leaves no namespace or process behind."""

from __future__ import annotations

import os
import signal

import pytest

from faults.netns import namespaces

pytestmark = [pytest.mark.net, pytest.mark.procs, pytest.mark.timeout(120)]

PORT = 7000


def echoes(events) -> int:
    """The number of round trips a tcp-client reported."""
    return sum(1 for e in events if "echo" in e.data)


def echo_pair(net, server_host="server", client_host="client", to=None, **client):
    """(echo server, client) probes, the client connected to `to` (default: the server) and 3 echoes in."""
    server = net.python(server_host, "probes.py", "tcp-echo", "--port", str(PORT))
    server.wait_for(lambda ev: ev, timeout=30, what="listening")
    options = [x for k, v in client.items() for x in (f"--{k}", str(v))]
    target = to or f"{net.addr(server_host, client_host)}:{PORT}"
    proc = net.python(client_host, "probes.py", "tcp-client", "--to", target, *options)
    proc.wait_for(lambda ev: echoes(ev) >= 3, timeout=30, what="3 echoes")
    return server, proc


def stalled_after(proc, count: int) -> bool:
    """The client reported a stall after its `count`-th echo and no further echo (a blocked link)."""
    return proc.wait_for(lambda ev: any(e.data.get("stalled", 0) > count for e in ev), timeout=10,
                         what="stall") and echoes(proc.events) <= count + 1


def test_partition_blocks_and_heal_resumes(make_net):
    net = make_net(["server", "client"])
    _, client = echo_pair(net, stall=0.5)
    net.partition("server")
    before = echoes(client.events)
    assert stalled_after(client, before)
    net.heal()
    client.wait_for(lambda ev: echoes(ev) >= before + 5, timeout=30, what="5 echoes after healing")
    assert not [e for e in client.events if "error" in e.data or "closed" in e.data]


def test_reset_is_econnreset(make_net):
    net = make_net(["server", "client"])
    _, client = echo_pair(net, every=0.2)
    assert net.reset_connections("server") == 1
    error = client.wait_for(lambda ev: [e.data for e in ev if "error" in e.data], timeout=10, what="error")
    assert error[0]["error"] == "ConnectionResetError"


def udp_received(net, count: int = 1000) -> int:
    """Send a paced burst of `count` datagrams client -> server; how many arrived."""
    sink = net.python("server", "probes.py", "udp-sink", "--port", str(PORT), "--idle", "1")
    sink.wait_for(lambda ev: ev, timeout=30, what="listening")
    net.python("client", "probes.py", "udp-burst", "--to", f"{net.addr('server')}:{PORT}", "--count", str(count))
    return sink.wait_for(lambda ev: [e.data["received"] for e in ev if "received" in e.data], timeout=60,
                         what="count")[0]


def test_loss_drops_some_packets_of_a_udp_burst(make_net):
    net = make_net(["server", "client"])
    assert udp_received(net) == 1000
    net.loss(30)
    assert 400 < udp_received(net) < 900  # 700 expected; the binomial spread is about 15
    net.loss(0)
    assert udp_received(net) == 1000


def tcp_rate(net, size: int) -> float:
    """Bytes per second of one bulk TCP transfer of `size` bytes client -> server, at the receiver."""
    sink = net.python("server", "probes.py", "tcp-sink", "--port", str(PORT))
    sink.wait_for(lambda ev: ev, timeout=30, what="listening")
    net.python("client", "probes.py", "tcp-bulk", "--to", f"{net.addr('server')}:{PORT}", "--bytes", str(size))
    done = sink.wait_for(lambda ev: [e.data for e in ev if "received" in e.data], timeout=60, what="transfer")[0]
    assert done["received"] == size
    return size / done["seconds"]


def test_rate_cap_bounds_bytes_per_second(make_net):
    net = make_net(["server", "client"])
    cap = 16e6 / 8  # 16 Mbit/s in bytes per second
    assert tcp_rate(net, 3_000_000) > 4 * cap  # a veth moves hundreds of MB/s
    net.rate(16)
    assert tcp_rate(net, 3_000_000) < 2 * cap  # slowness can only lower it


def test_latency_relay_delays_every_round_trip(make_net):
    net = make_net(["server", "mid", "client"])
    net.latency("mid", PORT, (net.addr("server"), PORT), ms=50, jitter=20)
    _, client = echo_pair(net, to=f"{net.addr('mid', 'client')}:{PORT}", every=0.0)
    client.wait_for(lambda ev: echoes(ev) >= 10, timeout=30, what="10 echoes")
    rtts = [e.data["rtt"] for e in client.events if "echo" in e.data]
    assert min(rtts) >= 2 * 0.030  # each way at least ms - jitter; data checked by the client


def test_vanished_host_sends_no_fin(make_net):
    net = make_net(["server", "client"])
    server, client = echo_pair(net, stall=0.5)
    net.vanish("server")
    assert server.popen.poll() == -signal.SIGKILL
    assert stalled_after(client, echoes(client.events))
    assert not [e for e in client.events if "error" in e.data or "closed" in e.data]


def test_sigstop_stalls_the_peer_and_sigcont_resumes(make_net):
    net = make_net(["server", "client"])
    server, client = echo_pair(net, stall=0.5)
    server.signal(signal.SIGSTOP)
    before = echoes(client.events)
    assert stalled_after(client, before)
    server.signal(signal.SIGCONT)
    client.wait_for(lambda ev: echoes(ev) >= before + 3, timeout=30, what="3 echoes after SIGCONT")


def test_close_leaves_no_namespace_or_process(make_net):
    net = make_net(["server", "mid", "client"])
    names = list(net.names.values())
    sleeper = net.run("mid", ["sleep", "600"])
    net.partition("mid")
    assert set(names) <= set(namespaces())
    net.close()
    assert not set(names) & set(namespaces())
    assert sleeper.popen.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.kill(sleeper.pid, 0)
