"""The suite's guards against forking a process in which JAX runs (tests/conftest.py, pyproject's
filterwarnings): a test that starts JAX in the test process fails, and so does a later test that forks
there; marked `isolated`, the same test runs in an interpreter of its own and the fork is safe. One pytest
run holds both stories, the isolated one first."""

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


    def fork():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0


    @pytest.mark.isolated
    def test_starts_jax_isolated():
        import jax.numpy as jnp

        assert float(jnp.ones(3).sum()) == 3.0


    def test_forks_after_the_isolated_one():
        fork()


    @pytest.mark.net
    def test_starts_jax():
        import jax.numpy as jnp

        assert float(jnp.ones(3).sum()) == 3.0


    def test_forks_later():
        fork()
""")


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> subprocess.CompletedProcess:
    """pytest, with the suite's configuration and conftest, on the four cases above, in that order, in one
    process: JAX started in an isolated test, a fork, JAX started in the test process (marked `net`), a fork."""
    root = tmp_path_factory.mktemp("no-fork")
    (root / "tests").mkdir()
    (root / "tests" / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (root / "tests" / "test_cases.py").write_text(CASES)
    (root / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    env = {key: value for key, value in os.environ.items() if key != "TENSORCOM_TEST_ISOLATED"}
    command = [sys.executable, "-m", "pytest", "tests/test_cases.py", "-p", "no:xdist", "-p", "no:cacheprovider",
               "-p", "no:randomly", "-q", "-rA", "-o", "addopts=--strict-markers"]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=150)


def test_jax_in_the_test_process_and_a_later_fork_both_fail(cases):
    out = cases.stdout
    assert cases.returncode == 1, out + cases.stderr
    assert "test_starts_jax started JAX in the test process: mark it isolated" in out, out
    assert "FAILED tests/test_cases.py::test_forks_later" in out, out
    assert "JAX is multithreaded" in out, out
    assert "1 failed, 3 passed, 1 error" in out, out  # test_starts_jax passes and fails at its teardown


def test_an_isolated_jax_test_leaves_the_test_process_free_to_fork(cases):
    out = cases.stdout
    assert "PASSED tests/test_cases.py::test_starts_jax_isolated" in out, out + cases.stderr
    assert "PASSED tests/test_cases.py::test_forks_after_the_isolated_one" in out, out
