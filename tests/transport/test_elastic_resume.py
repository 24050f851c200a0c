"""A zsplit job resumed with another number of ranks: three ranks (zjoin Connections) and their server
are stopped mid-epoch (the server SIGKILLed); the server resumed from `merge_states` of the ranks'
saved states feeds 2 ranks, and, from the same states, 4 ranks: each time the union of before and
after is the epoch, every sample once."""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from tensorcom import Connection
from tensorcom.transport.resume import merge_states, save_state

pytestmark = [pytest.mark.net, pytest.mark.procs]

SAMPLES = 36  # tests/cli/test_serve_elastic.py:elastic_pipeline, batches of 3
FACTORY = os.path.join(os.path.dirname(os.path.dirname(__file__)), "cli", "test_serve_elastic.py:elastic_pipeline")


def server(popen, port: int, ranks: int, *more: str):
    return popen.start([sys.executable, "-m", "tensorcom.cli.main", "serve", FACTORY, f"zsplit://127.0.0.1:{port}",
                        "-w", "2", "--epochs", "1", "-r", "0", "--min-consumers", str(ranks), *more])


def run_ranks(port: int, ranks: int, state: dict | None, take: int | None, stopped: threading.Barrier | None = None):
    """`ranks` zjoin Connections in threads, each continuing `state`, taking `take` batches (None: to
    the end of the epoch); with `stopped`, each waits there (after saving) before it closes. Returns
    each rank's (keys, saved state)."""
    results: list = [None] * ranks

    def rank(i: int) -> None:
        with Connection(f"zjoin://127.0.0.1:{port}", timeout=30) as conn:
            if state is not None:
                conn.load_state_dict(state)
            batches = list(conn) if take is None else [conn.recv() for _ in range(take)]
            results[i] = ([key for batch in batches for key in batch["__key__"]], conn.state_dict())
            if stopped is not None:
                stopped.wait(timeout=30)

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(ranks)]
    for thread in threads:
        thread.start()
    return threads, results


def join(threads, results):
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads) and None not in results
    return results


def test_a_zsplit_job_resumes_with_fewer_and_with_more_ranks(popen, tmp_path, free_port):
    port = free_port()
    first = server(popen, port, 3, "--portions", "3")
    stopped = threading.Barrier(4)
    threads, results = run_ranks(port, 3, None, 2, stopped)
    stopped.wait(timeout=60)  # every rank has its batches and has saved its state
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    before = [key for keys, _ in join(threads, results) for key in keys]
    merged = merge_states([saved for _, saved in results])
    path = tmp_path / "job.json"
    save_state(merged, path)
    assert len(before) == 18 and merged["streams"][next(iter(merged["streams"]))]["workers"] == 3
    for ranks in (2, 4):
        port = free_port()
        resumed = server(popen, port, ranks, "--resume", str(path))
        after = [key for keys, _ in join(*run_ranks(port, ranks, merged, None)) for key in keys]
        assert resumed.wait(timeout=30) == 0
        assert sorted(before + after) == [f"s{i:03d}" for i in range(SAMPLES)]


def test_a_restarted_ray_actor_passes_over_what_the_consumers_and_the_hub_have():
    """tensorcom.ray's driver: the batches a dead actor's portion sent to the hub (a count from the
    hub, or the indices) join those the consumers had before the serve."""
    from tensorcom.adapters.ray._driver import after_handover
    from tensorcom.transport.index_set import IndexSet

    resumed = IndexSet([[0, 2], [4, 5]])
    assert after_handover(resumed, IndexSet([[0, 3]])).intervals == [[0, 6]]  # a count: indices 2, 3, 5
    assert after_handover(resumed, IndexSet([[6, 7]])).intervals == [[0, 2], [4, 5], [6, 7]]
    assert after_handover(resumed, IndexSet()) == resumed
