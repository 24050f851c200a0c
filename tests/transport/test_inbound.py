"""The plain-scheme receiver's sessions (`_inbound`): which of a sender's acknowledgement addresses
it connects its link to."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

from tensorcom import Connection
from tensorcom.transport._inbound import pick_address

STAR_REASON = ("a sender bound on every interface (zpub://*:P, zrpush://0.0.0.0:P) advertises "
               "tcp://*:Q, which pick_address returns as it is; the link's connect to it fails (EINVAL) "
               "and the receiver raises TransportError on the sender's first message. Fix: replace '*' "
               "with the host the message came from (frames[0].get('Peer-Address'), bracketed for "
               "IPv6), else the data endpoint's host")


def test_the_address_of_the_data_endpoints_transport_is_chosen():
    addresses = ("tcp://10.0.0.1:4000", "ipc:///tmp/feed.ack-01234567")
    assert pick_address(addresses, "zpull+ipc:///tmp/feed") == "ipc:///tmp/feed.ack-01234567"
    assert pick_address(addresses, "zsub://10.0.0.1:5000") == "tcp://10.0.0.1:4000"
    assert pick_address(("ipc:///tmp/x.ack-1",), "zsub://10.0.0.1:5000") is None
    assert pick_address(addresses, "zpull+inproc://feed") is None


def test_among_several_tcp_addresses_the_one_on_the_data_host_is_chosen():
    addresses = ("tcp://10.0.0.1:4000", "tcp://192.168.1.5:4001")
    assert pick_address(addresses, "zrpull://192.168.1.5:5000") == "tcp://192.168.1.5:4001"
    assert pick_address(addresses, "zrpull://other:5000") == "tcp://10.0.0.1:4000"


def test_a_wildcard_address_becomes_the_host_the_receiver_reached():
    assert pick_address(("tcp://*:4000",), "zsub://10.1.2.3:5000") == "tcp://10.1.2.3:4000"


@pytest.mark.net
@pytest.mark.timeout(30)
@pytest.mark.parametrize("schemes", [("zpub", "zsub"), ("zrpush", "zrpull")])
def test_a_sender_bound_on_every_interface_feeds_its_receiver(free_port, schemes):
    port = free_port()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ExposedEndpointWarning: this binds on every interface
        out = Connection(f"{schemes[0]}://*:{port}", timeout=10)
    inp = Connection(f"{schemes[1]}://127.0.0.1:{port}", timeout=10)
    stop = threading.Event()

    def feed():
        while not stop.is_set():
            out.send([np.zeros(3, "f4")])
            stop.wait(0.02)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        assert inp.recv()[0].shape == (3,)
    finally:
        stop.set()
        feeder.join(5)
        inp.close()
        out.close(linger=0)


@pytest.mark.net
@pytest.mark.timeout(60)
def test_several_pullers_end_their_pass_while_the_sender_idles_after_its_marker(free_port):
    """Each puller holds its marker until the sender's floor passes the batches the other took; the
    sender tells it over the links while it waits for nothing (no send, no close)."""
    port = free_port()
    out = Connection(f"zrpush://127.0.0.1:{port}", timeout=10)
    ended: list[int] = []
    both = threading.Event()

    def one_pass():
        with Connection(f"zrpull://127.0.0.1:{port}", timeout=30) as inp:
            ended.append(sum(1 for _ in inp))
            if len(ended) == 2:
                both.set()

    pullers = [threading.Thread(target=one_pass, daemon=True) for _ in range(2)]
    try:
        for puller in pullers:
            puller.start()
        while out._end.outbound.peers() < 2:  # both connected: round-robin gives each some batches
            out._end.outbound.link.poll(20)
        out.serve([[np.full(4, i, "i4")] for i in range(40)])
        assert both.wait(20), f"passes ended: {ended}; the others wait for the sender's next call"
        assert sum(ended) == 40 and min(ended) > 0
    finally:
        out.close()
        for puller in pullers:
            puller.join(10)
