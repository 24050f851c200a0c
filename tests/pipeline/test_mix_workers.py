"""Mixtures under workers: torchdata's StatefulDataLoader with 2 forked workers restored mid-epoch
(check_a_mixture_resumes_under_two_forked_workers, run by test_resume's forking test),
and tensorcom.serve(workers=2) of a mixed pipeline restarted from its consumer's state."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import mixtures  # tests/pipeline/mixtures.py: what the workers import
from tensorcom.adapters.torch import iterable_dataset
from tensorcom.pipeline import serve
from tensorcom.pipeline.mix import member_counts
from tensorcom.transport.connection import Connection
from test_resume import pipeline_states
from worker_functions import unchanged

pytestmark = [pytest.mark.procs]


ALL = sorted(f"s{i:04d}" for i in itertools.chain(range(40), range(1000, 1030)))


def loader(workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(iterable_dataset(mixtures.mixed_pipeline()), batch_size=None, num_workers=workers,
                              collate_fn=unchanged, multiprocessing_context="fork", timeout=60)


def round_robin(*portions):
    """The order in which a loader's workers' items arrive: one of each in turn, a finished one left out."""
    iterators, out = [iter(p) for p in portions], []
    while iterators:
        for it in list(iterators):
            try:
                out.append(next(it))
            except StopIteration:
                iterators.remove(it)
    return out


def check_a_mixture_resumes_under_two_forked_workers(caplog):
    """A StatefulDataLoader with 2 forked workers restored mid-epoch gives the rest in the order of an
    uninterrupted run; also test_resume's case of a Pipeline under 2 workers. Run by
    test_resume.test_forked_dataloader_workers, in an interpreter of its own with the other forking checks."""
    pytest.importorskip("torchdata.stateful_dataloader")
    p = mixtures.mixed_pipeline()
    whole = [s["__key__"] for s in round_robin(p.shard(0, 2), p.shard(1, 2))]
    assert sorted(whole) == ALL
    first = loader(2)
    iterator = iter(first)
    before = [next(iterator)["__key__"] for _ in range(23)]
    state = json.loads(json.dumps(first.state_dict()))
    del iterator, first
    assert len(pipeline_states(state)) == 2  # each worker's position, saved by us
    counts = member_counts(state)  # each worker's per-member counts, added up
    assert sum(counts.values()) == 23 and counts["big"] == sum(int(k[1:]) < 1000 for k in before)
    second = loader(2)
    second.load_state_dict(state)
    assert before + [s["__key__"] for s in second] == whole
    assert "naively fast-forwarding" not in caplog.text  # restored from our state, not by replaying


SERVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from tensorcom.pipeline.serving import serve
    if __name__ == "__main__":
        serve("mixtures:batched_mixture", {url!r}, workers=2, report=None,
              connection_options={{"sndhwm": 1}})
""")


def keys(batches):
    return [key for batch in batches for key in batch["__key__"]]


@pytest.mark.net
@pytest.mark.timeout(120)
def test_serve_of_a_mixture_resumes_from_the_consumers_state(popen, tmp_path, free_port):
    port, port2, state_path = free_port(), free_port(), tmp_path / "state.json"
    script = tmp_path / "server.py"
    script.write_text(SERVER.format(tests=os.path.dirname(__file__), url=f"zpush://127.0.0.1:{port}"))
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30, rcvhwm=1) as conn:
        server = popen.start([sys.executable, str(script)])
        before = keys(conn.recv() for _ in range(5))
        conn.save_state(state_path)
        assert server.poll() is None  # mid-epoch: its workers wait for the consumer to confirm the rest
        os.kill(server.pid, signal.SIGKILL)  # its main process (as the OOM killer): its workers follow it
        server.wait(timeout=10)
    result = {}
    with Connection(f"zpull://127.0.0.1:{port2}", timeout=30) as conn:
        conn.load_state_dict(json.loads(state_path.read_text()))
        thread = threading.Thread(target=lambda: result.update(serve(
            "mixtures:batched_mixture", f"zpush://127.0.0.1:{port2}", workers=2, report=None,
            resume=str(state_path))))
        thread.start()
        after = keys(conn)
        thread.join(timeout=30)
    assert len(before) == 20 and sorted(before + after) == ALL  # every sample once: nothing repeated, nothing lost
    assert result["samples"] == 50


@pytest.mark.timeout(60)
def test_the_data_mix_example_runs_and_resumes_exactly(popen):
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data_mix.py")
    proc = popen.python(example, "--short", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=50)
    assert proc.returncode == 0, err[-3000:]
    assert out.count("web 70, books 30") == 3  # 70/30 in every window of 100
    assert "every sample of both members once: True" in out
    assert "saved after 150 samples: {'web': 104, 'books': 46}" in out
    assert "the same as an uninterrupted run: True" in out
