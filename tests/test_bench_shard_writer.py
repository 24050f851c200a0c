"""Smoke test of benchmarks/shard_writer.py: a tiny run (tensorcom and WebDataset's ShardWriter) writes every
image with both writers (the script raises on a lost sample) and prints its table with the ratio and target."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "shard_writer.py"


@pytest.mark.procs
@pytest.mark.timeout(120)
def test_a_tiny_run_prints_a_row_per_writer(tmp_path):
    pytest.importorskip("webdataset")
    command = [sys.executable, str(SCRIPT), "--images", "60", "--per-shard", "20", "--repeats", "1",
               "--writers", "tensorcom,webdataset", "--root", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=100, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split(" | ")[0] for line in done.stdout.splitlines() if line.startswith("| ")][1:]
    assert rows == ["| tensorcom", "| webdataset"], done.stdout
    assert "# 60 JPEGs" in done.stdout and "target >= 3x" in done.stdout
