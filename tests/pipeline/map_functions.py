"""The functions that test_workers, test_portions, test_worker_reuse and test_processes hand to worker
processes: a module of their own, so that those processes (and the parents that the tests start and
kill) import these, numpy and the pipeline's stages, and nothing of the tests."""

import os
import signal
import threading
import time

import numpy as np

from tensorcom.pipeline import stages


def square(x):
    return x * x


def slow_square(x):
    time.sleep(0.002 * (x % 3))
    return x * x


def fail_on_three(sample):
    if sample["i"] == 3:
        raise ValueError(f"cannot handle {sample['i']}")
    return sample["i"]


def kill_self_on_five(x):
    if x == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.01)
    return x


def noise(x, rng):
    return x + rng.random()


def big(x):
    return np.full(16384, x, np.float32)


def slow_numbers(index, count):
    """Portion `index` of `count` of the natural numbers, slowly."""
    for x in range(index, 10**9, count):
        time.sleep(0.01)
        yield x


def make_unpicklable(x):
    return threading.Lock() if x == 2 else x


def identity(x):
    return x


def pid_and_square(x):
    time.sleep(0.002)
    return os.getpid(), x * x


def fail_on_k3(sample):
    if sample["__key__"] == "k3":
        raise ValueError("bad sample k3")
    return sample


def failing_portion(index, count):
    """Portion `index` of `count` of six keyed samples, through fail_on_k3 (the key noted as stages do)."""
    for position, sample in enumerate([{"__key__": f"k{i}"} for i in range(index, 6, count)]):
        yield stages.call(fail_on_k3, sample, None, position)


INIT_FLAG = {"value": "unset"}


def noisy(x, rng):
    return np.full(3, x, np.int64) + rng.integers(0, 1000)


def fail_on_seven(sample):
    if sample["i"] == 7:
        raise ValueError("seven is bad")
    return sample["i"]


def kill_on_five(x):
    if x == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def slow(x):
    time.sleep(0.01)
    return x


def set_flag():
    INIT_FLAG["value"] = "set"


def read_flag(x):
    return (x, INIT_FLAG["value"])


def unpicklable(x):
    return lambda: x


def lambda_free_image(x):
    return np.full((224, 224, 3), x % 251, np.uint8)


class LeavingAGrandchild:
    """make(i, n) for shard_parallel: fork a grandchild that holds the worker's pipe and sentinel open
    (its pid written to `path`, so the test can kill it), then end the worker with status 3."""

    def __init__(self, path):
        self.path = path

    def __call__(self, index, count):
        pid = os.fork()
        if pid == 0:
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
            while True:
                signal.pause()
        with open(self.path, "w") as f:
            f.write(str(pid))
        os._exit(3)


def tagged(x, rng):
    """(x, a draw of the sample's rng, the pid of the process that mapped it)."""
    return x, round(float(rng.random()), 12), os.getpid()


def counted(path, x):
    """x, after adding a line to the file at `path` (how many samples were mapped so far)."""
    with open(path, "a") as stream:
        stream.write(f"{x}\n")
    return x


def failing_one(index):
    if index == 1:
        raise ValueError(f"worker {index} is bad")
    return [index]


def killing_one(index):
    if index == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return [index]


def blocking(index):
    yield index
    threading.Event().wait()  # until terminated


def forking_a_grandchild(index):
    """Fork a grandchild that holds the pipe open (and waits to be killed), name it, exit 3."""
    pid = os.fork()
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
        threading.Event().wait()
    yield pid
    os._exit(3)


def counting(index):
    return range(index + 2)
