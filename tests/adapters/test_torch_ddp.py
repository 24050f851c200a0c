"""BatchDataset under data-parallel training: two CPU processes (gloo, a gradient all-reduce per step, as
DDP makes) see the same number of batches in every pass,
whether each iterates its portion of a pipeline or joins one zsplit server, and a rank whose source
fails stops the other instead of leaving it waiting (tests/adapters/torch_ddp_rank.py is a rank)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import find_free_port

pytestmark = [pytest.mark.net, pytest.mark.procs,  # torch is imported by the ranks only, not here
              pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")]

RANK = str(Path(__file__).with_name("torch_ddp_rank.py"))
EPOCHS, BATCHES = 2, 21  # what the zsplit server serves


def serve_split(url: str, result: dict) -> None:
    """A zsplit server for two consumers: EPOCHS epochs of BATCHES batches of 2 ids (epoch e: 1000 e + ...)."""
    from tensorcom import Connection

    try:
        conn = Connection(url, min_consumers=2)
        for epoch in range(EPOCHS):
            for i in range(BATCHES):
                conn.send({"id": np.arange(2, dtype=np.int32) + 1000 * epoch + 2 * i})
            conn.end_epoch()
        conn.close(linger=30)
        result["closed"] = True
    except Exception as exc:
        result["error"] = repr(exc)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Both ranks' results (torch_ddp_rank.py, run once for every test here) and the server's."""
    tmp, url, served = tmp_path_factory.mktemp("ddp"), f"127.0.0.1:{find_free_port()}", {}
    server = threading.Thread(target=serve_split, args=(f"zsplit://{url}", served), daemon=True)
    server.start()
    port, procs = find_free_port(), []
    outs = [tmp / f"rank{rank}.json" for rank in range(2)]
    try:
        for rank, out in enumerate(outs):
            procs.append(subprocess.Popen([sys.executable, RANK, "--rank", str(rank), "--port", str(port),
                                           "--out", str(out), "--url", f"zjoin://{url}"], start_new_session=True))
        assert [proc.wait(timeout=90) for proc in procs] == [0, 0]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    server.join(timeout=30)
    return [json.loads(out.read_text()) for out in outs], served


def test_rank_portions_of_a_pipeline_end_even(ranks):
    results = [rank["shards"] for rank in ranks[0]]
    # Pipeline(range(13)).batch(2): rank 0's portion has 4 batches, rank 1's 3; both yield 3 in each pass
    for rank in results:
        assert [len(ids) // 2 for ids in rank["passes"]] == [3, 3]
        assert rank["counts"]["passes"] == 2 and rank["counts"]["batches"] == 6
    assert results[0]["passes"][0] == [0, 2, 4, 6, 8, 10] and results[0]["counts"]["dropped"] == 2
    assert results[1]["passes"][0] == [1, 3, 5, 7, 9, 11] and results[1]["counts"]["dropped"] == 0


def test_a_rank_whose_source_fails_stops_every_rank(ranks):
    results = [rank["shards"] for rank in ranks[0]]
    assert results[1]["error"] == ["RuntimeError", "the disk went away"]
    kind, text = results[0]["error"]
    assert kind == "WorkerError" and "rank(s) [1]" in text and "the disk went away" in text


def test_zsplit_consumers_with_different_counts_end_even(ranks):
    results, served = [rank["zsplit"] for rank in ranks[0]], ranks[1]
    assert served == {"closed": True}  # every batch was delivered (and acknowledged)
    counts = [rank["counts"] for rank in results]
    assert counts[0]["passes"] == counts[1]["passes"] == EPOCHS
    for epoch in range(EPOCHS):
        yielded = [rank["passes"][epoch] for rank in results]
        assert len(yielded[0]) == len(yielded[1]) > 0  # the same number of batches on both ranks
        both = yielded[0] + yielded[1]
        assert len(set(both)) == len(both) and all(1000 * epoch <= i < 1000 * epoch + 2 * BATCHES for i in both)
    # credit 1 against credit 6: rank 1 received more; what it had beyond rank 0's count was dropped
    assert counts[0]["dropped"] == 0 < counts[1]["dropped"]
    assert sum(c["batches"] + c["dropped"] for c in counts) == EPOCHS * BATCHES
