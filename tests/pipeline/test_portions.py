"""Pipeline.parallel / shard_parallel: whole portions in processes, round-robin order, errors, deaths, cleanup
(the parent-death test of portion workers is in test_workers, beside the map workers')."""

import contextlib
import multiprocessing
import os
import signal
import time

import numpy as np
import pytest

import map_functions
from map_functions import (LeavingAGrandchild, fail_on_seven, kill_on_five, lambda_free_image,  # what workers run
                           noisy, read_flag, set_flag, slow, unpicklable)
from tensorcom.errors import WorkerDied, WorkerError
from tensorcom.pipeline import Pipeline
from tensorcom.pipeline._portions import shard_parallel


def numbers(index, count):
    return iter(range(index, 10, count))


def seeded(items=37, batch=5):
    return Pipeline(range(items), seed=4).map(noisy, rng=True).batch(batch)


@pytest.mark.procs
def test_processes_and_threads_give_the_same_batches_round_robin():
    threads = [b.tolist() for b in seeded().parallel(2, processes=False)]
    procs = [b.tolist() for b in seeded().parallel(2)]
    assert threads == procs
    assert len(procs) == len(seeded().parallel(2)) == 8  # portions of 19 and 18 -> 4 batches each
    assert [len(b) for b in procs] == [5, 5, 5, 5, 5, 5, 4, 3]
    plain = [b.tolist() for b in Pipeline(range(37)).batch(5).parallel(2)]
    assert plain[:2] == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]] and plain[-1] == [31, 33, 35]


@pytest.mark.procs
def test_every_sample_once_and_shards_nest():
    whole = sorted(x for b in Pipeline(range(50)).batch(4).parallel(3) for x in b.tolist())
    assert whole == list(range(50))
    halves = [sorted(x for b in Pipeline(range(50)).shard(w, 2).batch(4).parallel(2, processes=False)
                     for x in b.tolist()) for w in range(2)]
    assert sorted(halves[0] + halves[1]) == list(range(50)) and not set(halves[0]) & set(halves[1])


def test_shard_parallel_order_is_round_robin_and_uneven_portions_drop_out():
    assert list(shard_parallel(numbers, workers=3, processes=False)) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert list(shard_parallel(numbers, workers=4, processes=False)) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]


@pytest.mark.procs
def test_batches_arrive_intact_and_writable():
    batches = list(Pipeline(range(8)).map(lambda_free_image).batch(4).parallel(2))
    assert len(batches) == 2 and batches[0].shape == (4, 224, 224, 3) and batches[0].dtype == np.uint8
    assert batches[0].flags.writeable
    batches[0][0, 0, 0, 0] = 7
    assert batches[0][1, 5, 5, 0] == 2 and batches[1][0, 0, 0, 0] == 1


@pytest.mark.procs
def test_init_runs_in_each_worker_process_first():
    got = list(Pipeline(range(4)).map(read_flag).parallel(2, init=set_flag))
    assert got == [(0, "set"), (1, "set"), (2, "set"), (3, "set")]
    assert map_functions.INIT_FLAG["value"] == "unset"


@pytest.mark.procs
def test_error_in_a_portion_is_a_worker_error_with_key_and_traceback():
    samples = [{"__key__": f"k{i}", "i": i} for i in range(12)]
    with pytest.raises(WorkerError, match="seven is bad") as info:
        list(Pipeline(samples).map(fail_on_seven).batch(2).parallel(2))
    assert info.value.key == "k7"
    assert "fail_on_seven" in info.value.remote_traceback


@pytest.mark.procs
def test_killed_portion_worker_is_reported_within_seconds():
    start = time.monotonic()
    with pytest.raises(WorkerDied, match="signal 9"):
        list(Pipeline(range(40)).map(kill_on_five).batch(2).parallel(2))
    assert time.monotonic() - start < 10


@pytest.mark.procs
def test_unpicklable_item_is_a_worker_error():
    with pytest.raises(WorkerError, match=r"cannot send item 0 of portion [01] to the parent"):
        list(Pipeline(range(4)).map(unpicklable).parallel(2))


@pytest.mark.procs
def test_closing_early_stops_the_processes():
    before = set(multiprocessing.active_children())  # other tests' processes are not this test's
    gen = iter(Pipeline(range(10**5)).map(slow).parallel(2))
    assert next(gen) == 0
    started = [p for p in multiprocessing.active_children() if p not in before]
    assert len(started) >= 2
    gen.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(p.is_alive() for p in started):
        time.sleep(0.05)
    assert not any(p.is_alive() for p in started)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="workers"):
        Pipeline(range(3)).parallel(0)
    with pytest.raises(ValueError, match="buffer"):
        Pipeline(range(3)).parallel(2, buffer=0)
    with pytest.raises(TypeError, match="module-level"):
        Pipeline(range(3)).map(lambda x: x).parallel(2)
    with pytest.raises(TypeError, match="init"):
        Pipeline(range(3)).parallel(2, init=5)
    assert len(Pipeline(range(3)).map(lambda x: x).parallel(2, processes=False)) == 3


class Unpicklable:
    def __iter__(self):
        return iter(range(3))

    def __reduce__(self):
        raise TypeError("this source stays here")


@pytest.mark.procs
def test_a_source_that_cannot_be_pickled_fails_at_start_and_leaves_no_process():
    before = set(multiprocessing.active_children())
    with pytest.raises(TypeError, match="stays here"):
        list(Pipeline(Unpicklable()).parallel(2))
    assert set(multiprocessing.active_children()) - before == set()


def test_repeat_after_parallel_runs_new_epochs_and_len_counts_them():
    pipeline = Pipeline(range(10), seed=1).map(noisy, rng=True).batch(3).parallel(2, processes=False).repeat(2)
    batches = [b.tolist() for b in pipeline]
    assert len(batches) == len(pipeline) == 8  # portions of 5 -> 2 batches each, twice
    assert batches[:4] != batches[4:]  # the second pass is epoch 1: other random draws


@contextlib.contextmanager
def leaving_a_grandchild(tmp_path):
    """A LeavingAGrandchild writing to a file in `tmp_path`; its grandchild is killed on the way out."""
    path = tmp_path / "grandchild.pid"
    try:
        yield LeavingAGrandchild(str(path))
    finally:
        if path.exists():
            os.kill(int(path.read_text()), signal.SIGKILL)


@pytest.mark.procs
def test_a_portion_worker_whose_pipe_a_grandchild_holds_is_reported_dead(tmp_path):
    """Issue 17: the portions' pool waited on the worker's pipe and sentinel only, which a forked
    grandchild keeps open, and hung; the process owner asks the OS and reports the death."""
    with leaving_a_grandchild(tmp_path) as make:
        with pytest.raises(WorkerDied, match=r"portion worker process 0 \(pid \d+\) exited with status 3"):
            list(shard_parallel(make, workers=1))
