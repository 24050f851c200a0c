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
