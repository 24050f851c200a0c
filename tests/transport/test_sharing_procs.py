"""zshare / zsplit / zjoin with real processes (tests/transport/share_peer.py): every batch to every
consumer, or each batch to exactly one; dead consumers, a dead server, late joiners, other batch
sizes, a long pause."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = [pytest.mark.net, pytest.mark.procs]

PEER = str(Path(__file__).with_name("share_peer.py"))


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def ids_of(path: Path, pass_number: int | None = None) -> list[int]:
    return [i for r in records(path) if "ids" in r and (pass_number is None or r["pass"] == pass_number)
            for i in r["ids"]]


def expected_ids(batches: int, batch: int, epoch: int = 0) -> list[int]:
    return [epoch * 10000 + i for i in range(batches * batch)]


class Peers:
    """Starts share_peer.py servers and consumers through the popen fixture."""

    def __init__(self, popen, tmp_path: Path, port: int):
        self.popen, self.tmp, self.port = popen, tmp_path, port
        self.outs: list[Path] = []

    def server(self, scheme: str, *args: str) -> subprocess.Popen:
        return self.popen.python(PEER, "serve", f"{scheme}://127.0.0.1:{self.port}", *args,
                                 stdout=subprocess.PIPE, text=True)

    def consumer(self, *args: str) -> tuple[subprocess.Popen, Path]:
        out = self.tmp / f"consumer{len(self.outs)}.jsonl"
        self.outs.append(out)
        proc = self.popen.python(PEER, "consume", f"zjoin://127.0.0.1:{self.port}", "--out", str(out), *args)
        return proc, out


@pytest.fixture
def peers(popen, tmp_path, free_port):
    return Peers(popen, tmp_path, free_port())


def wait_all(procs, timeout=60):
    return [proc.wait(timeout=timeout) for proc in procs]


def server_result(server) -> dict:
    lines = [json.loads(line) for line in server.stdout.read().splitlines() if line.strip()]
    return lines[-1]


def test_share_three_consumers_each_get_every_id_once_in_order(peers):
    """The third consumer takes its own batch size (3 where the server sends 4): the same samples."""
    server = peers.server("zshare", "--batches", "31", "--epochs", "2", "--min-consumers", "3")
    consumers = [peers.consumer("--passes", "2", "--every", str(0.002 * k), *(["--batch-size", "3"] if k == 2 else []))
                 for k in range(3)]
    assert wait_all([p for p, _ in consumers]) == [0, 0, 0]
    assert server.wait(timeout=30) == 0 and server_result(server) == {"closed": True}
    for _, out in consumers:
        for epoch in range(2):
            assert ids_of(out, epoch) == expected_ids(31, 4, epoch)
    for epoch in range(2):
        sizes = [len(r["ids"]) for r in records(consumers[2][1]) if "ids" in r and r["pass"] == epoch]
        assert sizes == [3] * 41 + [1]


def test_split_union_is_every_id_without_duplicates(popen, tmp_path, ipc_path):
    """Over ipc (tcp: the tests below)."""
    path = ipc_path()
    server = popen.python(PEER, "serve", f"zsplit+ipc://{path}", "--batches", "60", "--epochs", "2",
                          "--min-consumers", "3", stdout=subprocess.PIPE, text=True)
    outs = [tmp_path / f"c{k}.jsonl" for k in range(3)]
    consumers = [popen.python(PEER, "consume", f"zjoin+ipc://{path}", "--out", str(out), "--passes", "2",
                              "--every", str(0.003 * k)) for k, out in enumerate(outs)]
    assert wait_all(consumers) == [0, 0, 0]
    assert server.wait(timeout=30) == 0
    for epoch in range(2):
        got = [i for out in outs for i in ids_of(out, epoch)]
        assert sorted(got) == expected_ids(60, 4, epoch)
        assert all(ids_of(out, epoch) for out in outs)  # everyone had a share


@pytest.mark.parametrize("scheme, pad", [("zshare", 0), ("zsplit", 0), ("zshare", 1 << 17), ("zsplit", 1 << 17)],
                         ids=["zshare", "zsplit", "zshare-shared-memory", "zsplit-shared-memory"])
def test_a_consumer_killed_mid_epoch_does_not_stop_the_others(peers, scheme, pad):
    # pad: bytes of filler per batch; 128 KiB batches reach consumers through shared memory
    server = peers.server(scheme, "--batches", "80", "--min-consumers", "3", "--liveness", "2", "--pad", str(pad))
    consumers = [peers.consumer("--every", "0.02", "--liveness", "2") for _ in range(3)]
    victim, victim_out = consumers[0]
    deadline = time.monotonic() + 20
    while len(ids_of(victim_out)) < 12 and time.monotonic() < deadline:
        time.sleep(0.05)
    victim.kill()
    survivors = consumers[1:]
    assert wait_all([p for p, _ in survivors]) == [0, 0]
    assert server.wait(timeout=30) == 0
    everything = expected_ids(80, 4)
    if scheme == "zshare":
        for _, out in survivors:
            assert ids_of(out) == everything
        return
    kept = [i for _, out in survivors for i in ids_of(out)]
    assert len(kept) == len(set(kept))  # no duplicate among the survivors
    counts = Counter(kept + ids_of(victim_out))
    assert sorted(counts) == everything  # nothing lost
    doubled = [i for i, n in counts.items() if n > 1]
    assert len(doubled) <= 4 * 4  # at most the victim's credit (4 batches) was handed out twice


def test_server_killed_every_consumer_raises_peer_lost_within_liveness(peers):
    server = peers.server("zshare", "--batches", "1000", "--every", "0.01", "--min-consumers", "2",
                          "--liveness", "2")
    consumers = [peers.consumer("--liveness", "2") for _ in range(2)]
    deadline = time.monotonic() + 20
    while not all(ids_of(out) for _, out in consumers) and time.monotonic() < deadline:
        time.sleep(0.05)
    server.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    assert wait_all([p for p, _ in consumers], timeout=20) == [3, 3]
    for _, out in consumers:
        error = records(out)[-1]
        assert error["error"] == "PeerLost" and f"127.0.0.1:{peers.port}" in error["text"]
        assert error["at"] - killed < 2 + 1.5


def test_late_joiner_starts_at_the_epoch_start_and_is_told(peers):
    server = peers.server("zshare", "--batches", "12", "--epochs", "2", "--every", "0.25")
    first, first_out = peers.consumer("--passes", "2")
    deadline = time.monotonic() + 20
    while len(ids_of(first_out)) < 8 and time.monotonic() < deadline:  # two batches into epoch 0
        time.sleep(0.02)
    late, late_out = peers.consumer("--passes", "1")
    assert wait_all([first, late]) == [0, 0]
    assert server.wait(timeout=30) == 0
    joined = records(late_out)[-1]["joined_at"]
    (position,) = joined.values()
    assert position == [0, 0]  # the epoch's start was still in the replay buffer
    assert ids_of(late_out, 0) == expected_ids(12, 4, 0)


@pytest.mark.slow  # 25-35 s: started first, so that it does not end the run alone
def test_a_consumer_paused_30_seconds_loses_nothing(peers):
    server = peers.server("zshare", "--batches", "20", "--min-consumers", "2")
    pausing, pausing_out = peers.consumer("--pause-at", "5", "--pause", "30")
    steady, steady_out = peers.consumer()
    assert wait_all([pausing, steady], timeout=90) == [0, 0]
    assert server.wait(timeout=30) == 0
    assert ids_of(pausing_out) == ids_of(steady_out) == expected_ids(20, 4)
