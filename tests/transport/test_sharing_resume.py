"""A job of three on a zshare server, SIGKILLed mid-epoch and restarted from its saved state while the
server and the other jobs go on (tensorcom.transport.sharing.catch_up, tensorcom.pipeline.catch_up):
the restarted job's union of before and after is each epoch once, in each portion's order, and the
other jobs get everything once. Real processes: tensorcom.serve (2 portions) with its catch-up
worker, and the consumers: tests/transport/resume_peer.py."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from resume_peer import SAMPLES, make_pipeline  # tests/transport/resume_peer.py

pytestmark = [pytest.mark.net, pytest.mark.procs]

PEER = str(Path(__file__).with_name("resume_peer.py"))
EPOCHS = 2
PORTIONS = 2


def batches(path: Path) -> list[dict]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if "ids" in r]


def portion_order() -> dict:
    """(epoch, a batch's ids) -> (portion v, its index in v's epoch), from the pipeline itself."""
    where = {}
    for epoch in range(EPOCHS):
        for v in range(PORTIONS):
            for index, batch in enumerate(make_pipeline().shard(v, PORTIONS).set_epoch(epoch)):
                where[(epoch, tuple(int(i) for i in batch["id"]))] = (v, index)
    return where


def check_every_sample_once(records: list[dict], where: dict) -> None:
    """Each pass p holds the ids of one epoch exactly once, each portion's batches in its order (that
    of an uninterrupted job)."""
    for p in range(EPOCHS):
        ids = [i for r in records if r["pass"] == p for i in r["ids"]]
        assert sorted(ids) == list(range(SAMPLES)), f"pass {p}"
        order = [where[(p, tuple(r["ids"]))] for r in records if r["pass"] == p]
        for v in range(PORTIONS):
            indices = [i for w, i in order if w == v]
            assert indices == list(range(len(indices))), f"pass {p}, portion {v}"


class Search:
    """A served stream (zshare or zsplit) and its three jobs "a", "b" and "x" (resume_peer.py): a and
    b stop after `hold` batches until the restarted x has its first (`restart_x`)."""

    def __init__(self, popen, tmp_path: Path, port: int, replay: int, scheme: str, hold: int, ray: bool = False):
        self.popen, self.tmp, self.url = popen, tmp_path, f"zjoin://127.0.0.1:{port}"
        self.server = popen.python(PEER, "serve", f"{scheme}://127.0.0.1:{port}", "--replay", str(replay),
                                   "--ray", str(int(ray)), stdout=subprocess.PIPE, text=True)
        self.go, self.held = tmp_path / "go", [tmp_path / f"{name}.held" for name in ("a", "b")]
        self.others = [self.job(name, "--hold-at", str(hold), "--held", str(mark), "--hold-file", str(self.go))
                       for name, mark in zip(("a", "b"), self.held)]

    def job(self, name: str, *args: str):
        out, state = self.tmp / f"{name}.jsonl", self.tmp / f"{name}.state"
        return self.popen.python(PEER, "consume", self.url, "--out", str(out), "--state", str(state), *args), out

    def restart_x(self):
        """x again from its state, once a and b are held; every process ends well; x's output."""
        restarted, out = self.job("x", "--resume", "1", "--wait-for", ",".join(map(str, self.held)),
                                  "--touch", str(self.go))
        assert [p.wait(timeout=60) for p in (restarted, *(p for p, _ in self.others))] == [0, 0, 0]
        assert self.server.wait(timeout=60) == 0
        served = json.loads(self.server.stdout.read().splitlines()[-1])  # everything delivered, or an error
        assert served == {"served": EPOCHS * SAMPLES // 2}
        return out


@pytest.mark.parametrize("replay, ray", [(64, False), (2, False)], ids=["within-replay", "beyond-replay"])
def test_a_restarted_job_gets_exactly_the_rest_of_its_epoch(popen, tmp_path, free_port, replay, ray):
    search = Search(popen, tmp_path, free_port(), replay, "zshare", hold=25, ray=ray)
    victim, out = search.job("x", "--die-after", "7")
    assert victim.wait(timeout=60) == -signal.SIGKILL
    assert len(batches(out)) == 7
    # it comes back once the others are 25 batches in (epoch 1): with replay 2 its session expired and
    # what it lacks of epoch 0 left the buffer long ago; the others wait for its first batch
    out = search.restart_x()
    where = portion_order()
    check_every_sample_once(batches(out), where)
    for _, other in search.others:
        check_every_sample_once(batches(other), where)
        assert sum(len(r["ids"]) for r in batches(other)) == EPOCHS * SAMPLES


def test_a_restarted_zsplit_rank_keeps_the_job_union_every_sample_once(popen, tmp_path, free_port):
    search = Search(popen, tmp_path, free_port(), 16, "zsplit", hold=5)
    victim, out = search.job("x", "--save-until", "3", "--die-after", "6")  # its checkpoint: after batch 3
    assert victim.wait(timeout=60) == -signal.SIGKILL
    checkpoint = batches(out)[:3]
    out.rename(tmp_path / "x-before.jsonl")  # what it used after its checkpoint is lost with it
    out = search.restart_x()
    job = checkpoint + batches(out) + [r for _, other in search.others for r in batches(other)]
    for p in range(EPOCHS):  # what the job trained on, from its checkpoint on: each sample once
        got = sorted(i for r in job if r["pass"] == p for i in r["ids"])
        assert got == list(range(SAMPLES)), f"pass {p}: missing {set(range(SAMPLES)) - set(got)}"


def test_a_ray_served_pipeline_has_the_catch_up_worker_a_dataset_cannot_have():
    """tensorcom.ray's driver gives its hub the catch-up worker for actors serving a pipeline (the
    same worker as tensorcom.serve's, tested above with a real job), none for Ray Data feeds."""
    pytest.importorskip("ray")
    from tensorcom.adapters.ray import attach_catch_up_of
    from tensorcom.adapters.ray._actors import DatasetFeed, PipelineFeed
    from tensorcom.pipeline.catch_up import CatchUpWorker

    class Hub:  # what attach_catch_up reads and sets: the server's catch-up input, the hook
        def __init__(self):
            self.catch_up, self.server = None, type("Server", (), {"catch_up_address": "ipc:///nowhere"})()

    served, dataset = Hub(), Hub()
    attach_catch_up_of(served, [PipelineFeed(f"{PEER}:make_pipeline")] * 2)
    attach_catch_up_of(dataset, [DatasetFeed(None, 2, {})])
    assert isinstance(served.catch_up, CatchUpWorker) and served.server.catch_up is served.catch_up
    assert [len(batch["id"]) for batch in served.catch_up.make().shard(0, 2)] == [2] * (SAMPLES // 4)
    assert dataset.catch_up is None

