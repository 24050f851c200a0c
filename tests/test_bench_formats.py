"""Smoke test of benchmarks/formats.py: a tiny run (tensorcom and the bare pyarrow loop) counts every row
with both readers and prints its table with the ratio and its target."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "formats.py"


@pytest.mark.procs
@pytest.mark.timeout(120)
def test_a_tiny_run_prints_a_row_per_reader(tmp_path):
    pytest.importorskip("pyarrow")
    command = [sys.executable, str(SCRIPT), "--rows", "600", "--files", "2", "--row-group", "100", "--repeats", "1",
               "--readers", "tensorcom,pyarrow", "--root", str(tmp_path)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=100, check=False, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split(" | ")[0] for line in done.stdout.splitlines() if line.startswith("| ")][1:]
    assert rows == ["| tensorcom", "| pyarrow"], done.stdout
    assert "| pyarrow |" in done.stdout and ">= 0.8x" in done.stdout
