"""The endpoint objects a Connection is built from (tensorcom.transport.ends), used without one:
Intake (pure), a PlainSender and a PlainReceiver, a SharingServerEnd and a JoinerEnd, SocketSecurity."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import zmq

from tensorcom import urls, wire
from tensorcom.transport import _sockets as sockets
from tensorcom.transport import security
from tensorcom.transport.ends import (EPOCH_END, Intake, JoinerEnd, PlainReceiver, PlainSender, SharingServerEnd,
                                      SocketSecurity)
from tensorcom.transport.options import Decoding, Encoding, PassOptions, SharingOptions, SocketOptions
from tensorcom.transport.stats import Statistics

PORTION = wire.Portion("s", 0, 1)


def decoded(frames: list) -> wire.Message:
    return wire.decode_message([memoryview(f) for f in frames])


def batch_message(seq: int, rows: int = 2) -> wire.Message:
    arrays = (np.full(rows, seq, np.int32),)
    return decoded(wire.encode_batch(arrays, seq=seq, epoch=0, sender="a", portion=PORTION))


def test_intake_accounts_for_batches_markers_and_passes():
    stats = Statistics()
    intake = Intake(Decoding(batch_transforms=[lambda a: a + 1]), PassOptions(), stats)
    batch = intake.accept(batch_message(0, rows=3))
    assert isinstance(batch, list) and batch[0].tolist() == [1, 1, 1]  # a tuple made a list, transformed
    assert (intake.count, intake.batch_size, stats.samples) == (3, 3, 3)
    intake.marker(decoded(wire.encode_end_of_epoch(seq=1, epoch=0, sender="a", portion=PORTION)))
    intake.pass_ended()
    assert intake.epoch_number == 1 and intake.consumed.state_dict()["passes"] == 1
    assert Intake(Decoding(), PassOptions(batch_count=False), Statistics()).samples([np.zeros(5)]) == 1


def test_one_pass_ends_at_the_pass_end_at_epoch_batches_and_at_total_samples():
    feed = iter([batch_message(i) for i in range(3)] + [EPOCH_END] + [batch_message(i) for i in range(5)])
    intake = Intake(Decoding(), PassOptions(epoch=4, total=14), Statistics())
    step = lambda: (lambda m: m if m is EPOCH_END else intake.accept(m))(next(feed))  # noqa: E731
    assert len(list(intake.one_pass(step))) == 3  # ended by EPOCH_END
    assert len(list(intake.one_pass(step))) == 4  # ended after epoch=4 batches
    assert len(list(intake.one_pass(step))) == 0  # 14 samples taken: total reached


@pytest.fixture
def context():
    ctx = sockets.acquire_context()
    yield ctx
    sockets.release_context()


@pytest.mark.net
@pytest.mark.parametrize("transport", ["tcp", "inproc"])
def test_a_plain_sender_and_receiver_without_a_connection(context, free_port, transport):
    where = f"127.0.0.1:{free_port()}" if transport == "tcp" else "ends"
    plus = "" if transport == "tcp" else "+inproc"
    options, encoding, security = SocketOptions(timeout=10), Encoding(), SocketSecurity()
    intake = Intake(Decoding(), PassOptions(), Statistics())
    pull = urls.parse(f"zrpull{plus}://{where}")
    receiver = PlainReceiver.open(context, pull, intake=intake, encoding=encoding, socket_options=options,
                                  security=security, name="receiver")
    receiver.attach(pull)
    push = urls.parse(f"zrpush{plus}://{where}")
    sender = PlainSender.open(context, push, encoding=encoding, socket_options=options, security=security,
                              stats=Statistics(), name="sender")
    sender.attach(push)
    assert (sender.outbound is not None) == (transport == "tcp")  # sessions, except over inproc
    try:
        assert sender.serve([[np.arange(4, dtype=np.int32) + i] for i in range(3)]) == 3
        got = [receiver.next_batch() for _ in range(4)]
        assert [b[0].tolist()[0] for b in got[:3]] == [0, 1, 2] and got[3] is EPOCH_END
        assert (intake.count, intake.epoch_number, sender.epoch_number) == (12, 1, 1)
    finally:
        delivery = sender.close(10.0)
        receiver.close()
        security.release()
    assert sender.socket is None and receiver.socket is None
    assert delivery is None if transport == "inproc" else not delivery.troubled


@pytest.mark.net
def test_a_sharing_server_end_and_a_joiner_end_without_a_connection(context, free_port):
    endpoints = urls.parse_all(f"zshare://127.0.0.1:{free_port()}")
    joins = urls.parse_all(endpoints[0].url.replace("zshare", "zjoin"))
    options, encoding, sharing = SocketOptions(timeout=20), Encoding(), SharingOptions(shm=False)
    server_security, joiner_security = SocketSecurity(), SocketSecurity()
    server = SharingServerEnd.open(context, endpoints, encoding=encoding, socket_options=options, sharing=sharing,
                                   security=server_security, stats=Statistics(), name="server")
    intake = Intake(Decoding(), PassOptions(), Statistics())
    joiner = JoinerEnd.open(context, joins, intake=intake, encoding=encoding, socket_options=options,
                            sharing=sharing, security=joiner_security, name="consumer")
    outcome: list = []

    def serve() -> None:
        try:
            server.sender.serve([{"id": np.arange(2, dtype=np.int32) + 2 * i} for i in range(3)])
            outcome.append(server.close(20.0))
        except Exception as exc:  # reported below
            outcome.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        ids = []
        while (batch := joiner.next_batch()) is not EPOCH_END:
            ids.extend(batch["id"].tolist())
        assert ids == list(range(6)) and intake.epoch_number == 1 and joiner.joined_at
        thread.join(20)
        assert not thread.is_alive() and len(outcome) == 1 and not isinstance(outcome[0], Exception)
        assert server.delivery is outcome[0] and not outcome[0]["undelivered"]
    finally:
        if thread.is_alive():
            server.abandon()
        joiner.close()
        server_security.release()
        joiner_security.release()


@pytest.mark.net
def test_socket_security_without_curve_leaves_sockets_plain_and_warns_for_an_exposed_bind(context, monkeypatch):
    for name in [n for n in os.environ if n.startswith("TENSORCOM_CURVE")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(security, "_warned", False)
    guard = SocketSecurity()
    sock = context.socket(zmq.PULL)
    try:
        guard.for_role(False)(sock)
        assert guard.effective is None and sock.curve_server == 0
        with pytest.warns(security.ExposedEndpointWarning):
            guard.warn_if_exposed(urls.parse("zpull://0.0.0.0:7880"))
    finally:
        sock.close(linger=0)
        guard.release()
