"""`tensorcom demo` end to end as a real subprocess: it trains to >= 90% held-out accuracy with torch and
with numpy, prints the manual commands, and leaves no server process behind when interrupted or killed.
The default run (what the README's first command runs) trains on the full demo data; the runs that check
an option train on a small set of it (SMALL: 4 classes, 256 training images of 32x32 pixels)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tensorcom.demo.backends import torch_available

pytestmark = [pytest.mark.net, pytest.mark.procs]

BIN = Path(sys.executable).parent
DEMO = [str(BIN / "tensorcom")] if (BIN / "tensorcom").exists() else [sys.executable, "-m", "tensorcom.cli.main"]
SMALL = ("--classes", "4", "--per-class", "64", "--size", "32")  # 256 training, 64 held-out images


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> dict:
    """Environment with TENSORCOM_CACHE in a temp dir holding the demo dataset and SMALL's (made once here)."""
    from tensorcom.demo.data import make_demo_dataset

    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TENSORCOM_CACHE", str(root))
        make_demo_dataset(size=64)
        make_demo_dataset(classes=4, per_class_train=64, per_class_test=16, size=32)
    return {**os.environ, "TENSORCOM_CACHE": str(root)}


def run_demo(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*DEMO, "demo", *args], env=env, capture_output=True, text=True, timeout=110)


def accuracy(stdout: str) -> float:
    match = re.search(r"^held-out accuracy: ([\d.]+)%$", stdout, re.M)
    assert match, stdout
    return float(match.group(1))


def test_demo_trains_to_90_percent(cache):
    result = run_demo(cache)
    assert result.returncode == 0, result.stdout + result.stderr
    assert accuracy(result.stdout) >= 90
    assert re.search(r"^  \./run serve-imagenet-dir -d \S+ -b 32 --size 64 .*zpush://127\.0\.0\.1:\d+$", result.stdout, re.M)
    assert re.search(r"^  \./run tensormon zpull://127\.0\.0\.1:\d+", result.stdout, re.M)
    assert re.search(r"^epoch 2/2: 2000 images in [\d.]+ s \(\d+ img/s\)", result.stdout, re.M)
    expected = "torch" if torch_available() else "numpy"
    assert f"training a {expected} classifier" in result.stdout


def test_demo_numpy_backend(cache):
    result = run_demo(cache, "--no-torch", "--epochs", "1", "--batch-size", "16", "--seed", "3", "--workers", "2",
                      *SMALL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "training a numpy classifier" in result.stdout
    assert "epoch 1/1: 256 images" in result.stdout  # both publishers' halves, one epoch
    assert accuracy(result.stdout) >= 90


@pytest.mark.parametrize("framework", ["keras", "jax"])
def test_demo_with_another_framework(cache, framework):
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} not installed")
    result = run_demo(cache, "--framework", framework, "--epochs", "3", "--batch-size", "16", *SMALL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"training a {framework} classifier" in result.stdout
    assert re.findall(r"^epoch (\d)/3: 256 images", result.stdout, re.M) == ["1", "2", "3"], result.stdout
    assert accuracy(result.stdout) >= 90


WITHOUT = "import sys; sys.modules[sys.argv[1]] = None; from tensorcom.cli.main import main; main(sys.argv[2:])"


@pytest.mark.parametrize("framework", ["keras", "jax"])
def test_demo_without_the_framework_says_which_extra(cache, framework):
    command = [sys.executable, "-c", WITHOUT, framework, "demo", "--framework", framework]
    result = subprocess.run(command, env=cache, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().endswith(f"error: needs {framework}: pip install 'tensorcom[{framework}]'")


def test_demo_framework_conflicts_with_no_torch(cache):
    result = run_demo(cache, "--no-torch", "--framework", "jax")
    assert result.returncode == 2 and "--no-torch" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_demo_fails_when_accuracy_is_too_low(cache):
    # one batch of all 256 images: one optimizer step, far from 100%
    result = run_demo(cache, "--no-torch", "--epochs", "1", "--batch-size", "256", "--min-accuracy", "1.0", *SMALL)
    assert "epoch 1/1: 256 images" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 1 and accuracy(result.stdout) < 100, result.stdout + result.stderr


@pytest.mark.parametrize("bad, says", [(("--epochs", "0"), "int >= 1"), (("--classes", "11"), "2 to 10, not 11")])
def test_demo_bad_argument(cache, bad, says):
    result = run_demo(cache, *bad)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr, result.stderr


def children_of(pid: int) -> set[int]:
    """Live (non-zombie) descendants of `pid`, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    """The pids of `pids` that still run (not gone, not zombies)."""
    result = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            result.add(pid)
    return result


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_no_orphan_server_when_interrupted(cache, popen, how):
    proc = popen.start([*DEMO, "demo", "--epochs", "50", "--no-torch"], env=cache, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:  # wait until the server runs and training has begun
        if line.startswith("training a"):
            break
    deadline = time.monotonic() + 20
    servers: set[int] = set()
    while time.monotonic() < deadline and len(servers) < 2:  # the server and its publisher process
        servers = children_of(proc.pid)
        time.sleep(0.2)
    assert len(servers) >= 2, servers
    os.kill(proc.pid, how)
    status = proc.wait(timeout=30)
    assert status == (130 if how == signal.SIGINT else -signal.SIGKILL)
    deadline = time.monotonic() + 15
    while alive(servers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(servers)
