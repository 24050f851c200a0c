"""Smoke test of benchmarks/sharing.py: a tiny run of setup (a) ends, prints its table and names (b)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "sharing.py"


@pytest.mark.slow
@pytest.mark.procs
@pytest.mark.timeout(400)
def test_quick_run_of_independent_pipelines_reports_a_row():
    pytest.importorskip("simplejpeg")
    command = [sys.executable, str(SCRIPT), "--ks", "1", "--images", "128", "--setups", "a", "--fanout-batches", "0",
               "--step-ms", "0", "--timeout", "240"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=360, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 1 |")]
    assert rows[0].startswith("| 1 | (a) 1 independent pipelines | 128 |"), done.stdout
    assert any("(b)" in row for row in rows)
