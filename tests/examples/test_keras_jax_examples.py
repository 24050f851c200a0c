"""examples/keras_train.py and examples/jax_train.py run as a user runs them (--short, as subprocesses,
each serving the demo data from a thread of its own to itself over 127.0.0.1): the loss falls from the
first epoch to the last and the held-out accuracy is reported; the JAX one on two forced host devices."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.net, pytest.mark.procs]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> dict:
    """Environment with TENSORCOM_CACHE in a temp dir holding the short demo dataset (made once here)."""
    from tensorcom.demo.data import make_demo_dataset

    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TENSORCOM_CACHE", str(root))
        make_demo_dataset(classes=4, per_class_train=64, per_class_test=25, size=32)  # as the examples' --short
    return {**os.environ, "TENSORCOM_CACHE": str(root)}


def run_example(name: str, env: dict) -> str:
    result = subprocess.run([sys.executable, str(EXAMPLES / name), "--short"], env=env, capture_output=True,
                            text=True, timeout=110)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    return result.stdout


def losses_and_accuracy(stdout: str) -> tuple[list[float], float]:
    losses = [float(x) for x in re.findall(r"^epoch \d+: loss ([\d.]+)", stdout, re.M)]
    match = re.search(r"^held-out accuracy: ([\d.]+)%$", stdout, re.M)
    assert len(losses) == 3 and match, stdout
    return losses, float(match.group(1))


def test_keras_example_learns(cache):
    if importlib.util.find_spec("keras") is None:
        pytest.skip("keras not installed")
    losses, accuracy = losses_and_accuracy(run_example("keras_train.py", cache))
    assert losses[-1] < losses[0] and accuracy > 50  # 4 classes: chance is 25%


def test_jax_example_learns_on_two_devices(cache):
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax not installed")
    env = {**cache, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    stdout = run_example("jax_train.py", env)
    assert "training on 2 device(s)" in stdout
    losses, accuracy = losses_and_accuracy(stdout)
    assert losses[-1] < losses[0] and accuracy > 50
