"""A job of three on a zshare server, SIGKILLed mid-epoch and restarted from its saved state while the
server and the other jobs go on (tensorcom.transport.sharing.catch_up, tensorcom.pipeline.catch_up):
the restarted job's union of before and after is each epoch once, in each portion's order, and the
other jobs get everything once. Real processes: tensorcom.serve's (2 portions, in a thread here),
its catch-up worker, and tests/transport/resume_peer.py consumers."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import pytest
from resume_peer import SAMPLES, make_pipeline  # tests/transport/resume_peer.py

from tensorcom.pipeline.serving import serve

pytestmark = [pytest.mark.net, pytest.mark.procs]

PEER = str(Path(__file__).with_name("resume_peer.py"))
EPOCHS = 2
PORTIONS = 2


def serving(port: int, replay: int, scheme: str = "zshare") -> tuple[threading.Thread, dict]:
    """tensorcom.serve in a thread: 2 portions, 2 epochs, 3 consumers; {"stats"} or {"error"}."""
    result: dict = {}

    def run():
        try:
            result["stats"] = serve(make_pipeline(), f"{scheme}://127.0.0.1:{port}", workers=PORTIONS, epochs=EPOCHS,
                                    min_consumers=3, sharing={"replay": replay, "liveness": 2.0}, report=None)
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def batches(path: Path) -> list[dict]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if "ids" in r]


def check_every_sample_once(records: list[dict]) -> None:
    """Each pass p holds the ids of one epoch exactly once, each portion's (id % 2) in its order."""
    for p in range(EPOCHS):
        ids = [i for r in records if r["pass"] == p for i in r["ids"]]
        assert sorted(ids) == list(range(SAMPLES)), f"pass {p}"
        for v in range(PORTIONS):
            mine = [i for i in ids if i % PORTIONS == v]
            assert mine == sorted(mine), f"pass {p}, portion {v}"


@pytest.mark.parametrize("replay", [64, 2], ids=["within-replay", "beyond-replay"])
def test_a_restarted_job_gets_exactly_the_rest_of_its_epoch(popen, tmp_path, free_port, replay):
    port = free_port()
    url = f"zjoin://127.0.0.1:{port}"
    go = tmp_path / "go"
    thread, result = serving(port, replay)

    def job(name, *args):
        out, state = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.state"
        return popen.python(PEER, "consume", url, "--out", str(out), "--state", str(state), *args), out

    held = [tmp_path / f"{name}.held" for name in ("a", "b")]
    others = [job(name, "--hold-at", "25", "--held", str(mark), "--hold-file", str(go))
              for name, mark in zip(("a", "b"), held)]
    victim, out = job("x", "--die-after", "7")
    assert victim.wait(timeout=60) == -signal.SIGKILL
    assert len(batches(out)) == 7
    # it comes back once the others are 25 batches in (epoch 1): with replay 2 its session expired and
    # what it lacks of epoch 0 left the buffer long ago; the others wait for its first batch
    restarted, _ = job("x", "--resume", "1", "--wait-for", ",".join(map(str, held)), "--touch", str(go))
    assert [p.wait(timeout=60) for p in (restarted, *(p for p, _ in others))] == [0, 0, 0]
    thread.join(timeout=60)
    assert "error" not in result and not thread.is_alive()
    check_every_sample_once(batches(out))
    for _, other in others:
        check_every_sample_once(batches(other))
        assert sum(len(r["ids"]) for r in batches(other)) == EPOCHS * SAMPLES


def test_a_restarted_zsplit_rank_keeps_the_job_union_every_sample_once(popen, tmp_path, free_port):
    port = free_port()
    url = f"zjoin://127.0.0.1:{port}"
    go = tmp_path / "go"
    thread, result = serving(port, 16, "zsplit")

    def rank(name, *args):
        out, state = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.state"
        return popen.python(PEER, "consume", url, "--out", str(out), "--state", str(state), *args), out

    held = [tmp_path / f"{name}.held" for name in ("a", "b")]
    others = [rank(name, "--hold-at", "5", "--held", str(mark), "--hold-file", str(go))
              for name, mark in zip(("a", "b"), held)]
    victim, out = rank("x", "--save-until", "3", "--die-after", "6")  # its checkpoint: after batch 3
    assert victim.wait(timeout=60) == -signal.SIGKILL
    checkpoint = batches(out)[:3]
    out.rename(tmp_path / "x-before.jsonl")  # what it used after its checkpoint is lost with it
    restarted, out = rank("x", "--resume", "1", "--wait-for", ",".join(map(str, held)), "--touch", str(go))
    assert [p.wait(timeout=60) for p in (restarted, *(p for p, _ in others))] == [0, 0, 0]
    thread.join(timeout=60)
    assert "error" not in result and not thread.is_alive()
    job = checkpoint + batches(out) + [r for _, other in others for r in batches(other)]
    for p in range(EPOCHS):  # what the job trained on, from its checkpoint on: each sample once
        got = sorted(i for r in job if r["pass"] == p for i in r["ids"])
        assert got == list(range(SAMPLES)), f"pass {p}: missing {set(range(SAMPLES)) - set(got)}"
