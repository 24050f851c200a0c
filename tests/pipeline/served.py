"""The pipelines and per-sample functions that test_serving's serving workers run: a module of its
own, so that those processes (and the servers the tests start and kill) import the pipeline layer
and numpy, and nothing of the tests."""

import os
import signal
import time

import numpy as np

from tensorcom.pipeline import Pipeline


def to_sample(i):
    return {"__key__": f"s{i:04d}", "x": np.full(4, i, np.int32), "i": np.int32(i)}


def make_pipeline():
    """A factory for serve("served:make_pipeline", ...): 40 samples in batches of 5."""
    return Pipeline(range(40)).map(to_sample).batch(5)


def fail_on_13(sample):
    if sample["i"] == 13:
        raise ValueError("thirteen is unlucky")
    return sample


def die_on_13(sample):
    if sample["i"] == 13:
        os.kill(os.getpid(), signal.SIGKILL)
    return sample


def slow(sample):
    time.sleep(0.005)
    return sample


def add_rss(batch):
    with open("/proc/self/statm") as f:
        batch["rss"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return batch


def big_sample(i):
    return {"i": np.int32(i), "x": np.zeros(1 << 20, np.uint8)}


def resumable_pipeline():
    """60 shuffled samples in batches of 4, slow enough that a server is stopped mid-epoch."""
    return Pipeline(range(60), seed=7).shuffle(10).map(to_sample).map(slow).batch(4)
