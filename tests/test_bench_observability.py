"""Smoke test of benchmarks/observability.py: a tiny run serves the folder with everything off
(--no-timing) and on (stage timing, the metrics endpoint scraped), and prints its table with the
on/off ratios against the 2% target. It runs without torch (tests/torchless.py): its servers resize with
Pillow, which is all a smoke test needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from torchless import torchless_env

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "observability.py"


@pytest.mark.slow
@pytest.mark.net
@pytest.mark.procs
@pytest.mark.timeout(200)
def test_a_tiny_run_measures_both_settings(tmp_path):
    pytest.importorskip("simplejpeg")
    pytest.importorskip("prometheus_client")
    command = [sys.executable, str(SCRIPT), "--images", "64", "--repeats", "1", "--publishers", "1",
               "--data", str(tmp_path / "data")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False,
                          env=torchless_env(tmp_path / "torchless"))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.splitlines()
    on = next(line for line in lines if line.startswith("  on: 64 images"))
    assert "stages read, batch, AugmentBatch, send" in on and " 0 scrapes" not in on, done.stdout
    assert any(line.startswith("  off: 64 images") for line in lines), done.stdout
    rows = [line.split(" | ")[0] for line in lines if line.startswith("| ")]
    assert rows[1:] == ["| off: --no-timing, no metrics",
                        "| on: timing, --metrics scraped every second", "| on / off (target: within 2%)"], done.stdout
