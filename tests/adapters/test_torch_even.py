"""adapters/_torch_even.py: the per-step agreement that keeps ranks even, with the other ranks scripted
(their states fed to a fake `agree`), and for real on a one-rank gloo group (a pass left early, then the
next). Two real processes: tests/adapters/test_torch_ddp.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist

import tensorcom
from tensorcom.adapters import _torch_even as even
from tensorcom.errors import WorkerError


@pytest.fixture
def others(monkeypatch):
    """The other ranks' states, one per agreement (HAVE once the script runs out); the states this rank
    brought are recorded in `others.mine`."""
    class Script(list):
        mine: list

    script = Script()
    script.mine = []

    def agree(state: int, group) -> int:
        script.mine.append(state)
        return min(state, script.pop(0) if script else even.HAVE)

    monkeypatch.setattr(even, "agree", agree)
    return script


class Closable:
    """An iterator over `items` that records whether it was closed."""

    def __init__(self, items):
        self.items, self.closed = iter(items), False

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.items)

    def close(self):
        self.closed = True


def test_a_local_source_stops_at_the_first_end_and_drops_what_it_had(others):
    others.extend([even.HAVE] * 3 + [even.ENDED])
    source, counts = Closable(range(4)), even.Counts()
    assert list(even.even_pass(even.Direct(source), None, counts)) == [0, 1, 2]
    assert (counts.passes, counts.batches, counts.dropped) == (1, 3, 1) and source.closed


def test_while_another_rank_waits_nobody_steps_and_nothing_is_lost(others):
    others.extend([even.WAITING, even.WAITING, even.HAVE, even.WAITING, even.HAVE, even.HAVE])
    counts = even.Counts()
    assert list(even.even_pass(even.Direct(iter(range(3))), None, counts)) == [0, 1, 2]
    assert counts.dropped == 0 and others.mine[-1] == even.ENDED


def test_a_stream_reads_ahead_while_others_wait_and_is_drained_to_its_end(others, monkeypatch):
    others.extend([even.HAVE] + [even.WAITING] * 4 + [even.ENDED])
    reader, counts, held = even.Readahead(iter(range(8)), ahead=1), even.Counts(), []
    scripted, shelf = even.agree, reader.shelf

    def agree(state: int, group) -> int:
        with shelf.cond:  # a collective takes a moment: the reader reads meanwhile, up to what it may hold
            assert shelf.cond.wait_for(lambda: len(shelf.items) >= shelf.limit or even.END in shelf.items,
                                         timeout=30)
            held.append(len(shelf.items))
        return scripted(state, group)

    monkeypatch.setattr(even, "agree", agree)
    monkeypatch.setattr(even, "POLL_SECONDS", 30)  # the first item is always on its way: poll() never says WAITING
    assert list(even.even_pass(reader, None, counts)) == [0]
    assert (counts.batches, counts.dropped) == (1, 7) and not reader.thread.is_alive()
    assert held == [1, 1, 2, 3, 4, 5]  # one ahead, then one more for each round another rank waited


def test_a_stream_left_early_stops_its_reader():
    stop = threading.Event()

    def endless():
        while not stop.is_set():
            yield 1

    reader = even.Readahead(endless(), ahead=2)
    passing = even.even_pass(reader, None, even.Counts())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(even, "agree", lambda state, group: state)
        assert next(passing) == 1
        passing.close()
    assert reader.join(timeout=5) and reader.shelf.stop
    stop.set()


@pytest.fixture
def two_ranks(monkeypatch):
    """Pretend to be rank 0 of 2; rank 1 fails at once when the test sets `texts[1]` (its traceback)."""
    texts = [None, None]
    monkeypatch.setattr(even, "agree", lambda state, group: min(state, even.FAILED if texts[1] else even.HAVE))
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(dist, "all_gather_object",
                        lambda out, text, group=None: out.__setitem__(slice(None), [text, texts[1]]))
    return texts


def broken():
    yield 1
    raise OSError("disk gone")


def test_a_rank_whose_source_fails_raises_its_own_error(two_ranks):
    with pytest.raises(OSError, match="disk gone"):
        list(even.even_pass(even.Direct(broken()), None, even.Counts()))


def test_the_other_ranks_stop_with_the_failed_ranks_error(two_ranks):
    two_ranks[1] = "Traceback (most recent call last):\n  ...\ntensorcom.errors.PeerLost: server gone\n"
    expected = r"rank\(s\) \[1\] failed \(tensorcom.errors.PeerLost: server gone\)"
    with pytest.raises(WorkerError, match=expected) as caught:
        list(even.even_pass(even.Direct(iter(range(3))), None, even.Counts()))
    assert "PeerLost: server gone" in caught.value.remote_traceback


@pytest.fixture
def one_rank(free_port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.net
def test_one_real_rank(one_rank):
    assert even.even_group(None, None) is None  # one rank: nothing to keep even
    assert even.even_group(True, None) is dist.group.WORLD  # gloo: the default group itself
    assert even.agree(even.WAITING, dist.group.WORLD) == even.WAITING
    dataset = tensorcom.torch.BatchDataset([[torch.arange(2)]] * 3, even=True)
    assert len(list(dataset)) == 3 and (dataset.counts.passes, dataset.counts.dropped) == (1, 0)


@pytest.mark.net
def test_a_stream_pass_left_early_is_stopped_before_the_next(one_rank, free_port):
    """A `break` leaves the pass's reader thread running; the next pass joins it before it reads the stream,
    goes on with the rest of the epoch and ends at its marker; the pass after that is the next epoch."""
    url = f"127.0.0.1:{free_port()}"

    def send() -> None:
        with tensorcom.Connection(f"zpush://{url}", timeout=10) as sender:
            for epoch in range(2):
                for i in range(5):
                    sender.send([np.array([10 * epoch + i], np.int32)])
                sender.end_epoch()

    sending = threading.Thread(target=send)
    sending.start()
    try:
        with tensorcom.torch.BatchDataset(f"zpull://{url}", even=True, ahead=2, timeout=10) as dataset:
            for batch in dataset:
                first = int(batch[0])
                break
            rest, after = [[int(b[0]) for b in dataset] for _ in range(2)]
    finally:
        sending.join()
    assert first == 0 and rest and rest == list(range(5 - len(rest), 5))  # the reader took at most 4
    assert after == list(range(10, 15)) and dataset.counts.passes == 2
