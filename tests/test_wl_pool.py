"""wl-map / wl-xargs's ordered process pool: order, errors with keys, dead workers, no leftovers."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from tensorcom.cli.wlpool import call, ordered_map
from tensorcom.errors import WorkerDied, WorkerError

pytestmark = pytest.mark.procs


def slow_square(x: int) -> int:
    """x*x, later items faster, so that results arrive out of order."""
    time.sleep(0.02 * (5 - x % 5))
    return x * x


def fail_on_key(sample: dict) -> str:
    if sample["__key__"] == "k3":
        raise KeyError("txt")
    return sample["__key__"]


def die_on_two(x: int) -> int:
    if x == 2:
        os._exit(7)
    return x


def test_results_keep_input_order():
    assert list(ordered_map(slow_square, range(20), 3)) == [x * x for x in range(20)]
    assert multiprocessing.active_children() == []


def test_worker_exception_names_the_key():
    samples = [{"__key__": f"k{i}"} for i in range(8)]
    with pytest.raises(WorkerError) as info:
        list(ordered_map(fail_on_key, samples, 2))
    assert info.value.key == "k3" and "KeyError" in str(info.value)
    assert "fail_on_key" in info.value.remote_traceback
    assert multiprocessing.active_children() == []


def test_in_process_call_wraps_the_same_way():
    with pytest.raises(WorkerError) as info:
        call(fail_on_key, {"__key__": "k3"})
    assert info.value.key == "k3"


def test_dead_worker_is_reported():
    with pytest.raises(WorkerDied, match="exit code 7"):
        list(ordered_map(die_on_two, range(6), 2))
    assert multiprocessing.active_children() == []


def test_closing_early_stops_workers():
    results = ordered_map(slow_square, range(1000), 2)
    assert next(results) == 0
    results.close()
    assert multiprocessing.active_children() == []


def test_processes_must_be_positive():
    with pytest.raises(ValueError, match="0"):
        next(ordered_map(slow_square, range(3), 0))
