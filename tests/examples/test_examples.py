"""examples/*.py run as a user runs them, with --short, each as a subprocess in a session of its own: each
exits 0, its loss falls from the first epoch to the last, its held-out accuracy beats chance, and nothing
it started (servers and their workers, jobs, ranks, moto) is left running. The session is killed at
teardown whatever happened. The Keras and JAX examples serve the demo data from a thread of their own;
the JAX one trains on two forced host devices."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.net, pytest.mark.procs]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EPOCH = re.compile(r"^epoch (\d+): loss ([\d.]+)", re.M)
ACCURACY = re.compile(r"^held-out accuracy: ([\d.]+)%$", re.M)
CHANCE = 25.0  # --short: 4 classes


def installed(*modules: str) -> pytest.MarkDecorator:
    """Skip the test unless every module of `modules` can be imported."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    """os.environ with TENSORCOM_CACHE in a temp dir holding the --short demo data set, made once here
    by the examples' own examples/demo_setup.py."""
    spec = importlib.util.spec_from_file_location("demo_setup", EXAMPLES / "demo_setup.py")
    demo_setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo_setup)
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TENSORCOM_CACHE", str(root))
        demo_setup.demo_data(short=True)
    return {**os.environ, "TENSORCOM_CACHE": str(root), "PYTHONUNBUFFERED": "1"}


def run_example(popen, env: dict, name: str, *args: str, timeout: float = 150) -> str:
    """Run `examples/NAME --short ARGS`; its stdout, once it exited 0 and left no process behind."""
    proc = popen.python(str(EXAMPLES / name), "--short", *args, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name} did not finish within {timeout} s")
    assert proc.returncode == 0, out + err[-3000:]
    assert session_ends(proc.pid), f"{name} left processes running"
    return out


def session_ends(session: int, grace: float = 10.0) -> bool:
    """Whether every process of the example's session (its process group) is gone within `grace` s."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(session, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    os.killpg(session, signal.SIGKILL)
    return False


def learned(out: str) -> float:
    """Check the loss fell from the first epoch to the last; returns the held-out accuracy (%)."""
    losses = [float(loss) for _, loss in EPOCH.findall(out)]
    accuracy = ACCURACY.search(out)
    assert len(losses) == 3 and accuracy, out
    assert losses[-1] < losses[0], out
    return float(accuracy.group(1))


@installed("torch")
def test_pytorch_train(popen, env):
    out = run_example(popen, env, "pytorch_train.py")
    assert learned(out) > CHANCE
    assert re.findall(r"\((\d+) images\)", out) == ["256"] * 3  # every epoch of the server, whole


@installed("torch")
@pytest.mark.slow  # 25-35 s: started first, so that it does not end the run alone
def test_hyperparameter_search_jobs_share_one_server(popen, env):
    # two jobs (the example's default is three): each a process that imports torch, and two show the sharing
    out = run_example(popen, env, "hyperparameter_search.py", "--lrs", "0.01,0.003")
    assert re.search(r"^served \d+ batches once, to 2 jobs$", out, re.M), out
    results = re.findall(r"^lr ([\d.e-]+): loss ([\d.]+) -> ([\d.]+), held-out accuracy ([\d.]+)%$", out, re.M)
    assert sorted(float(lr) for lr, *_ in results) == [0.003, 0.01], out
    for _, first, last, accuracy in results:
        assert float(last) < float(first) and float(accuracy) > CHANCE, out
    assert len(re.findall(r"^job lr=\S+: epoch \d+: loss", out, re.M)) == 6


@installed("torch")
@pytest.mark.slow  # 25-35 s: started first, so that it does not end the run alone
def test_ddp_ranks_on_one_zsplit_server_take_the_same_number_of_steps(popen, env):
    # (--split shard costs as much again; the even ends of rank portions: tests/adapters/test_torch_ddp.py)
    out = run_example(popen, env, "ddp_train.py")
    epochs = re.findall(r"^epoch \d+: loss [\d.]+ \(batches per rank \[(\d+), (\d+)\], dropped \[(\d+), (\d+)\]\)$",
                        out, re.M)
    assert len(epochs) == 3, out
    for rank0, rank1, dropped0, dropped1 in epochs:
        assert rank0 == rank1 and int(rank0) > 0, out
        assert 2 * int(rank0) + int(dropped0) + int(dropped1) == 8, out  # the server's 8 batches, each to one rank
    assert learned(out) > CHANCE


@installed("torch", "moto", "s3fs")
def test_s3_shards_written_and_trained_from(popen, env):
    out = run_example(popen, env, "s3_shards.py")
    assert re.search(r"^wrote 4 training shards \(s3://tensorcom-demo/train-000000\.tar \.\.\.\) and 2 held-out",
                     out, re.M), out
    assert learned(out) > CHANCE


@installed("keras")
@pytest.mark.slow  # 25-35 s: started first, so that it does not end the run alone
def test_keras_example_learns(popen, env):
    assert learned(run_example(popen, env, "keras_train.py", timeout=110)) > 50  # 4 classes: chance is 25%


@installed("jax")
def test_jax_example_learns_on_two_devices(popen, env):
    two = {**env, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    out = run_example(popen, two, "jax_train.py", timeout=110)
    assert "training on 2 device(s)" in out
    assert learned(out) > 50
