"""A parallel stage's worker processes live across epochs (tensorcom.pipeline._portions.PortionPool):
the same processes serve every epoch, start the next epoch ahead, give the results a fresh start
would, end with the pipeline, and leave with their parent."""

import functools
import os
import signal
import subprocess
import textwrap

import pytest

from conftest import alive, soon
from map_functions import counted, tagged  # what the workers run
from tensorcom.pipeline import Pipeline
from test_workers import descendants


def expected(epoch: int) -> list:
    """Epoch `epoch` of the pipeline below computed inline, portion by portion, then round-robin."""
    portions = []
    for i in range(2):
        portion = Pipeline(range(10), seed=7).map(tagged, rng=True).shard(i, 2)
        portions.append([(x, draw) for x, draw, _ in portion.set_epoch(epoch)])
    return [item for pair in zip(*portions) for item in pair]


def without_pids(items: list) -> tuple[list, set]:
    return [(x, draw) for x, draw, _ in items], {pid for _, _, pid in items}


@pytest.mark.procs
def test_the_same_processes_serve_every_epoch_exactly_and_end_with_the_pipeline():
    pipeline = Pipeline(range(10), seed=7).map(tagged, rng=True).parallel(2)
    pids = []
    for epoch in (0, 1, 1, 3):  # 1 again and 3: the run started ahead is dropped, not served
        got, seen = without_pids(list(pipeline.set_epoch(epoch)))
        assert got == expected(epoch)
        pids.append(seen)
    assert len(pids[0]) == 2 and all(seen == pids[0] for seen in pids)
    early = iter(pipeline.set_epoch(2))
    next(early)
    early.close()  # an epoch left half-way stops its processes; the next one starts new ones
    assert soon(lambda: not any(alive(pid) for pid in pids[0]))
    got, seen = without_pids(list(pipeline.set_epoch(2)))
    assert got == expected(2) and seen.isdisjoint(pids[0])
    pipeline.close()
    assert soon(lambda: not any(alive(pid) for pid in seen))


@pytest.mark.procs
def test_a_process_map_keeps_its_processes_across_epochs_by_default():
    pipeline = Pipeline(range(10), seed=7).map(tagged, rng=True, workers=2, processes=True)
    inline = Pipeline(range(10), seed=7).map(tagged, rng=True)
    pids = []
    for epoch in (0, 1):
        got, seen = without_pids(list(pipeline.set_epoch(epoch)))
        assert got == without_pids(list(inline.set_epoch(epoch)))[0]
        pids.append(seen)
    assert os.getpid() not in pids[0] and pids[1] <= pids[0]
    pipeline.close()
    assert soon(lambda: not any(alive(pid) for pid in pids[0]))


@pytest.mark.procs
def test_the_next_epoch_is_computed_before_it_is_asked_for(tmp_path):
    calls = tmp_path / "calls"
    with Pipeline(range(8)).map(functools.partial(counted, str(calls))).parallel(2) as pipeline:
        assert sorted(pipeline) == list(range(8))
        assert soon(lambda: len(calls.read_text().split()) > 8)  # epoch 1 started in the workers
        assert sorted(pipeline.set_epoch(1)) == list(range(8))


PARENT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from map_functions import tagged
    from tensorcom.pipeline import Pipeline
    if __name__ == "__main__":
        pipeline = Pipeline(range(10), seed=7).map(tagged, rng=True).parallel(2)
        pids = {{pid for _, _, pid in pipeline}}
        print(" ".join(map(str, sorted(pids))), flush=True)
        time.sleep(60)
""")


@pytest.mark.procs
def test_a_killed_parent_leaves_no_worker_between_epochs(popen, tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(tests=os.path.dirname(__file__)))
    parent = popen.python(str(script), stdout=subprocess.PIPE, text=True)
    workers = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(workers) == 2 and set(workers) <= set(descendants(parent.pid))  # alive after the epoch
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    assert soon(lambda: not any(alive(pid) for pid in workers), 5.0)
