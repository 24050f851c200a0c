"""The functions tests/cli/test_wl_tools.py maps with run_tasks: module-level, so that spawned workers
import them, and in a module of their own, so that each worker imports only this one and not the test
module (pytest, numpy, tensorcom.shards: a few tenths of a second of CPU per worker)."""

from __future__ import annotations

import os
import time


def slow_square(x: int) -> int:
    """x*x, later items faster, so that results arrive out of order."""
    time.sleep(0.01 * (5 - x % 5))
    return x * x


def fail_on_key(sample: dict) -> str:
    if sample["__key__"] == "k3":
        raise KeyError("txt")
    return sample["__key__"]


def fail_late_and_early(sample: dict) -> str:
    """k2 fails after a while, k3 at once: the error reported must still be k2's."""
    if sample["__key__"] == "k2":
        time.sleep(0.3)
        raise ValueError("slow failure")
    if sample["__key__"] == "k3":
        raise ValueError("fast failure")
    return sample["__key__"]


def die_on_two(x: int) -> int:
    if x == 2:
        os._exit(7)
    return x
