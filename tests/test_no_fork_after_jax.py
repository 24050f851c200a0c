"""The suite's guards against forking a process in which JAX runs (tests/conftest.py, pyproject's
filterwarnings): a test that starts JAX in the test process fails, and so does a later test that forks
there; marked `isolated`, the same test runs in an interpreter of its own and the fork is safe."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax not installed")

ROOT = Path(__file__).resolve().parents[1]
CASES = textwrap.dedent("""
    import os

    import pytest

    MARK = {mark}


    @MARK
    def test_starts_jax():
        import jax.numpy as jnp

        assert float(jnp.ones(3).sum()) == 3.0


    def test_forks_later():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
""")


def run_cases(tmp_path: Path, mark: str) -> subprocess.CompletedProcess:
    """pytest, with the suite's configuration and conftest, on the two cases above (the first marked `mark`),
    in that order, in one process."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "tests" / "test_cases.py").write_text(CASES.format(mark=mark))
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    env = {key: value for key, value in os.environ.items() if key != "TENSORCOM_TEST_ISOLATED"}
    command = [sys.executable, "-m", "pytest", "tests/test_cases.py", "-p", "no:xdist", "-p", "no:cacheprovider",
               "-p", "no:randomly", "-q", "-o", "addopts=--strict-markers"]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100)


def test_jax_in_the_test_process_and_a_later_fork_both_fail(tmp_path):
    done = run_cases(tmp_path, "pytest.mark.net")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "test_starts_jax started JAX in the test process: mark it isolated" in done.stdout, done.stdout
    assert "FAILED tests/test_cases.py::test_forks_later" in done.stdout, done.stdout
    assert "JAX is multithreaded" in done.stdout, done.stdout


def test_an_isolated_jax_test_leaves_the_test_process_free_to_fork(tmp_path):
    done = run_cases(tmp_path, "pytest.mark.isolated")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout, done.stdout
