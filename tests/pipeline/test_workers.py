"""Parallel map on threads and spawned processes: results, order, bounds, errors, deaths, cleanup."""

import functools
import os
import signal
import subprocess
import textwrap
import threading
import time
from multiprocessing import resource_tracker

import numpy as np
import pytest
from conftest import alive, soon

from map_functions import (big, fail_on_k3, fail_on_three, failing_portion, identity,  # what the workers run
                           kill_self_on_five, make_unpicklable, noise, pid_and_square, slow_square, square)
from tensorcom.errors import WorkerDied, WorkerError
from tensorcom.pipeline import stages
from tensorcom.pipeline._failure import Failure, describe_exit
from tensorcom.pipeline._portions import shard_parallel
from tensorcom.pipeline.workers import WorkerPool, check_sizes, parallel_map, prefetching, serial_map


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def descendants(pid: int) -> list[int]:
    """Pids of every live descendant of `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


@pytest.mark.parametrize("ordered", [True, False])
def test_thread_map(ordered):
    out = list(parallel_map(range(50), slow_square, workers=4, ordered=ordered))
    assert (out if ordered else sorted(out)) == [x * x for x in range(50)]


@pytest.mark.procs
def test_process_map_ordered_and_unordered():
    assert list(parallel_map(range(40), slow_square, workers=2, processes=True)) == [x * x for x in range(40)]
    assert sorted(parallel_map(range(40), slow_square, workers=2, processes=True, ordered=False)) == [x * x for x in range(40)]


@pytest.mark.procs
def test_rngs_are_the_same_on_threads_processes_and_inline():
    key = (7, 2, 0, 1)
    inline = [noise(x, stages.sample_rng(*key, i)) for i, x in enumerate(range(20))]
    threads = list(parallel_map(range(20), noise, workers=3, rng_key=key, ordered=False))
    procs = list(parallel_map(range(20), noise, workers=2, processes=True, rng_key=key))
    assert sorted(threads) == sorted(inline) and procs == inline


def test_buffer_bounds_what_is_taken_from_the_source():
    pulled = []

    def source():
        for i in range(1000):
            pulled.append(i)
            yield i

    gen = parallel_map(source(), square, workers=2, buffer=4)
    assert pulled == []  # nothing starts before the first next()
    assert next(gen) == 0
    time.sleep(0.2)
    assert len(pulled) <= 5
    gen.close()


def test_thread_worker_error_carries_traceback_key_and_cause():
    samples = [{"__key__": f"s{i}", "i": i} for i in range(6)]
    with pytest.raises(WorkerError) as info:
        list(parallel_map(samples, fail_on_three, workers=2))
    assert info.value.key == "s3"
    assert "fail_on_three" in info.value.remote_traceback and "cannot handle 3" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.procs
def test_process_worker_error_carries_traceback_and_key():
    samples = [{"__key__": f"s{i}", "i": i} for i in range(6)]
    with pytest.raises(WorkerError) as info:
        list(parallel_map(samples, fail_on_three, workers=2, processes=True))
    assert info.value.key == "s3" and not isinstance(info.value, WorkerDied)
    assert "in fail_on_three" in info.value.remote_traceback and "ValueError" in info.value.remote_traceback


@pytest.mark.procs
def test_killed_worker_is_reported_within_seconds():
    start = time.monotonic()
    with pytest.raises(WorkerDied, match="signal 9"):
        list(parallel_map(range(100), kill_self_on_five, workers=2, processes=True))
    assert time.monotonic() - start < 10


def test_lambda_with_processes_is_a_clear_type_error():
    with pytest.raises(TypeError, match="module-level function"):
        parallel_map(range(3), lambda x: x, workers=1, processes=True)
    with pytest.raises(ValueError, match="workers"):
        parallel_map(range(3), square, workers=0)
    with pytest.raises(ValueError, match="buffer"):
        parallel_map(range(3), square, workers=1, buffer=0)


@pytest.mark.procs
def test_break_stops_every_worker_process():
    resource_tracker.ensure_running()  # this process's, which outlives the workers: not one of those started
    before = set(descendants(os.getpid()))
    gen = parallel_map(range(10**6), slow_square, workers=2, processes=True)
    assert next(gen) == 0
    started = set(descendants(os.getpid())) - before
    assert len(started) >= 2
    gen.close()
    soon(lambda: not any(alive(p) for p in started if p in descendants(os.getpid())), 5)
    assert not any(alive(p) for p in set(descendants(os.getpid())) & started)


def test_threads_end_after_close():
    before = threading.active_count()
    gen = parallel_map(range(10**6), square, workers=3)
    next(gen)
    gen.close()
    assert soon(lambda: threading.active_count() <= before, 5)


def test_prefetch_passes_items_and_errors():
    assert list(prefetching(range(100), 3)) == list(range(100))

    def broken():
        yield 1
        raise OSError("disk gone")

    gen = prefetching(broken(), 2)
    assert next(gen) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(gen)


PARENT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from map_functions import slow_square, slow_numbers
    from tensorcom.pipeline.workers import parallel_map
    from tensorcom.pipeline._portions import shard_parallel
    if __name__ == "__main__":
        kind, how = sys.argv[1:]
        if kind == "map":
            items = parallel_map(range(10**9), slow_square, workers=2, processes=True)
        else:
            items = shard_parallel(slow_numbers, workers=2, processes=True)
        for i, x in enumerate(items):
            if i == 0:
                print("ready", flush=True)
                time.sleep(0.5)
            if i == 1 and how == "raise":
                raise RuntimeError("the training loop failed")
            time.sleep(0.01)
""")


@pytest.mark.procs
@pytest.mark.parametrize("kind", ["map", "portion"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, None])
def test_kill_ctrl_c_or_exception_in_the_parent_leaves_no_orphan(popen, tmp_path, kind, sig):
    """Map and portion worker processes (serving workers: test_serving) leave with their parent."""
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(tests=os.path.dirname(__file__)))
    parent = popen.python(str(script), kind, "raise" if sig is None else "wait", stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    assert parent.stdout.readline().strip() == "ready"
    children = descendants(parent.pid)
    assert len(children) >= 2
    if sig is not None:
        os.kill(parent.pid, sig)
    parent.wait(timeout=10)
    if sig is None:
        assert "the training loop failed" in parent.stderr.read()
    soon(lambda: not any(alive(p) for p in children), 5)
    assert [p for p in children if alive(p)] == []


@pytest.mark.procs
def test_memory_steady_over_thousands_of_batches():
    gen = parallel_map(range(4000), big, workers=2, processes=True, ordered=False)
    for i, array in enumerate(gen):
        assert array.shape == (16384,)
        if i == 500:
            base = rss_bytes()
    growth = rss_bytes() - base
    assert growth < 30 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB over 3500 batches of 64 KiB"


@pytest.mark.procs
def test_unpicklable_values_fail_with_worker_error_instead_of_hanging():
    with pytest.raises(WorkerError, match="lock") as info:
        list(parallel_map(range(5), make_unpicklable, workers=1, processes=True))
    assert "pickle" in info.value.remote_traceback
    with pytest.raises(WorkerError, match="cannot be sent"):
        list(parallel_map([1, threading.Lock()], square, workers=1, processes=True))


def exit_thread(x):
    raise SystemExit(0)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_that_dies_is_reported():
    with pytest.raises(WorkerDied, match="thread"):
        list(parallel_map(range(3), exit_thread, workers=1))


@pytest.mark.procs
def test_results_cross_the_pipe_intact_and_writable():
    samples = [
        {"__key__": "a", "img": np.arange(24, dtype=np.float32).reshape(2, 3, 4), "txt": "héllo", "raw": b"\x00\xff"},
        (np.zeros((0, 3), np.uint8), np.asfortranarray(np.arange(6).reshape(2, 3)), np.arange(10)[::3]),
        np.ones((300, 300, 3), np.uint8),  # larger than one pipe buffer's default 64 KiB
        None,
    ]
    out = list(parallel_map(samples, identity, workers=2, processes=True))
    assert out[0]["txt"] == "héllo" and out[0]["raw"] == b"\x00\xff" and np.array_equal(out[0]["img"], samples[0]["img"])
    assert out[1][0].shape == (0, 3) and np.array_equal(out[1][1], samples[1][1]) and out[1][2].tolist() == [0, 3, 6, 9]
    assert out[2].sum() == 270000 and out[3] is None
    out[2][0, 0, 0] = 7  # arrays arrive writable


@pytest.mark.procs
@pytest.mark.parametrize("processes", [False, True])
def test_worker_pool_keeps_workers_and_ignores_abandoned_work(processes):
    pool = WorkerPool(pid_and_square, 2, processes=processes)
    try:
        first = pool.map(range(1000), buffer=8)
        assert next(first)[1] == 0
        first.close()  # abandoned with tasks still queued
        out = list(pool.map(range(30)))
        assert [x for _, x in out] == [x * x for x in range(30)]
        again = list(pool.map(range(30), ordered=False))
        assert sorted(x for _, x in again) == [x * x for x in range(30)]
        if processes:
            pids = {p for p, _ in out} | {p for p, _ in again}
            assert os.getpid() not in pids and len(pids) <= 2  # the same two processes served every map
        busy = pool.map(range(3))
        next(busy)
        with pytest.raises(RuntimeError, match="already"):
            next(pool.map(range(3)))
        busy.close()
    finally:
        pool.close()


def test_describe_exit_words_each_way_a_process_ends():
    assert describe_exit(-9) == "was killed by signal 9"
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(None) == "closed its pipe"


@pytest.mark.parametrize("workers, buffer", [(0, None), (True, None), (2, 0), (2, 1.5)])
def test_check_sizes_names_the_bad_value(workers, buffer):
    with pytest.raises(ValueError, match="workers" if buffer is None else "buffer"):
        check_sizes(workers, buffer)
    assert check_sizes(3, None) == 6 and check_sizes(3, 1) == 1


FAILING = {
    "thread map": lambda: parallel_map([{"__key__": f"k{i}"} for i in range(6)], fail_on_k3, workers=2),
    "process map": lambda: parallel_map([{"__key__": f"k{i}"} for i in range(6)], fail_on_k3, workers=2,
                                        processes=True),
    "thread portion": lambda: shard_parallel(failing_portion, workers=2, processes=False),
    "process portion": lambda: shard_parallel(failing_portion, workers=2, processes=True),
}


@pytest.mark.procs
@pytest.mark.parametrize("where", list(FAILING))
def test_every_worker_kind_reports_the_same_failure_record(where):
    with pytest.raises(WorkerError) as info:
        list(FAILING[where]())
    error, failure = info.value, info.value.failure
    assert isinstance(failure, Failure) and not isinstance(error, WorkerDied)
    assert (failure.key, failure.exc_type, failure.message) == ("k3", "ValueError", "bad sample k3")
    assert failure.position == (3 if "map" in where else 1)  # map: in the source; portion: in its output
    assert failure.worker in (0, 1) and "in fail_on_k3" in failure.traceback
    role = "map worker" if "map" in where else "portion worker"
    assert str(error).startswith(f"{role} {failure.worker} raised ValueError: bad sample k3 (sample 'k3')")
    assert error.key == "k3" and error.remote_traceback == failure.traceback
    assert isinstance(error.__cause__, ValueError) == where.startswith("thread")  # processes send no exception


def test_ordered_map_raises_the_first_failure_in_source_order_after_the_results_before_it():
    samples = [{"__key__": f"k{i}"} for i in range(6)]
    got = []
    with pytest.raises(WorkerError, match="k3"):
        for sample in parallel_map(samples, fail_on_k3, workers=3, buffer=6):
            got.append(sample["__key__"])
    assert got == ["k0", "k1", "k2"]


def test_serial_map_fails_like_a_worker():
    with pytest.raises(WorkerError, match=r"^map raised ValueError: bad sample k3 \(sample 'k3'\)") as info:
        list(serial_map([{"__key__": f"k{i}"} for i in range(6)], fail_on_k3))
    assert info.value.failure.key == "k3" and isinstance(info.value.__cause__, ValueError)


@pytest.mark.procs
def test_a_map_worker_whose_pipe_a_grandchild_holds_is_reported_dead(tmp_path):
    """Issue 17: the map's pool, like the portions' one, waited on pipes and sentinels that a forked
    grandchild keeps open, and hung; the process owner asks the OS and reports the death."""
    from test_portions import leaving_a_grandchild

    with leaving_a_grandchild(tmp_path) as make:
        with pytest.raises(WorkerDied, match=r"map worker process 0 \(pid \d+\) exited with status 3"):
            list(parallel_map([0], functools.partial(make, count=1), workers=1, processes=True))
