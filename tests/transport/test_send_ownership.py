"""What is delivered is what was passed: `send()` copies, so a sender may reuse its arrays at once;
`serve()` and `send(batch, copy=False)` pass ownership and hand ZeroMQ the arrays' own memory."""

import numpy as np
import pytest

from tensorcom.transport.connection import Connection

pytestmark = pytest.mark.net

ROWS = 1 << 18  # 1 MiB of int32 per batch: far above ZeroMQ's 64 KiB threshold for copying small frames


def refill_and_send(url, n):
    """Process body: send n batches made by overwriting the same two arrays in place, each filled with
    its batch index, right after each send() returns; then end the epoch."""
    images, labels = np.zeros(ROWS, np.int32), np.zeros(4, np.int32)
    with Connection(url, timeout=20, sndhwm=2) as conn:
        for i in range(n):
            images[:], labels[:] = i, i
            conn.send([images, labels])
        conn.end_epoch()


@pytest.mark.procs
@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_reusing_arrays_after_send_changes_nothing_received(transport, processes, free_port, ipc_path):
    address = f"127.0.0.1:{free_port()}" if transport == "tcp" else ipc_path()
    plus = "" if transport == "tcp" else "+ipc"
    n = 200
    with Connection(f"zpull{plus}://{address}", timeout=20, rcvhwm=2) as receiver:
        processes.start(refill_and_send, f"zpush{plus}://{address}", n)
        received = list(receiver)
    assert len(received) == n
    torn = [i for i, (images, labels) in enumerate(received)
            if not (images.min() == images.max() == labels.min() == labels.max() == i)]
    assert torn == []


class RecordingSocket:
    """A socket stand-in that records each send_multipart's frames and `copy`, then sends for real."""

    def __init__(self, socket):
        self.socket, self.sent = socket, []

    def send_multipart(self, frames, copy=True, **options):
        self.sent.append((list(frames), copy))
        return self.socket.send_multipart(frames, copy=copy, **options)

    def __getattr__(self, name):
        return getattr(self.socket, name)


def handed_over(sent, array):
    """True when some frame sent with copy=False is the memory of `array` itself (zero-copy)."""
    return any(not copy and any(np.shares_memory(np.frombuffer(f, np.uint8), array) for f in frames)
               for frames, copy in sent)


@pytest.fixture
def recorded_pair():
    """(sender with a RecordingSocket, receiver) over inproc."""
    with (Connection("zrpull+inproc://ownership", timeout=5) as receiver,
          Connection("zrpush+inproc://ownership", timeout=5) as sender):
        sender.socket = RecordingSocket(sender.socket)
        yield sender, receiver


def test_send_copies_by_default(recorded_pair):
    sender, receiver = recorded_pair
    images = np.full(ROWS, 7, np.int32)
    sender.send([images])
    images[:] = 8
    assert not handed_over(sender.socket.sent, images)
    assert all(copy for _, copy in sender.socket.sent)
    assert (receiver.recv()[0] == 7).all()


def test_send_copy_false_and_serve_hand_the_arrays_over(recorded_pair):
    sender, receiver = recorded_pair
    given, served = np.full(ROWS, 1, np.int32), np.full(ROWS, 2, np.int32)
    sender.send([given], copy=False)
    assert handed_over(sender.socket.sent, given)
    sender.serve([[served]])
    assert handed_over(sender.socket.sent, served)
    assert [int(b[0][0]) for b in receiver] == [1, 2]


def test_serve_copy_true_for_a_source_that_refills_its_arrays(recorded_pair):
    sender, receiver = recorded_pair
    images = np.zeros(ROWS, np.int32)

    def refilled():
        for i in range(3):
            images[:] = i
            yield [images]

    assert sender.serve(refilled(), copy=True) == 3
    assert not handed_over(sender.socket.sent, images)
    assert [int(b[0][0]) for b in receiver] == [0, 1, 2]
