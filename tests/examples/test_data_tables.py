"""examples/data_parquet.py and examples/data_hf.py (docs/data.md's "Parquet and Arrow" and "Hugging Face
datasets") run as a user runs them: each exits 0, splits its rows evenly between two workers, and
resumes exactly."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.procs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, tmp_path: Path) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    done = subprocess.run([sys.executable, str(EXAMPLES / name), "--dir", str(tmp_path)], capture_output=True,
                          text=True, timeout=90, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow not installed")
def test_the_parquet_example(tmp_path):
    out = run_example("data_parquet.py", tmp_path)
    assert "rows: 96 in 6 row groups" in out and "(16, 16, 16, 3) uint8" in out
    assert "two workers' portions: [48, 48] rows" in out
    assert "resumed after 2 batches: 4 more, the same as without a stop: True" in out


@pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="datasets not installed")
def test_the_hugging_face_example(tmp_path):
    out = run_example("data_hf.py", tmp_path)
    assert "rows: 64; first batch: images (16, 8, 8, 3) uint8" in out and "two workers: [32, 32] rows" in out
    assert "IterableDataset resumed after 10 rows: 54 more, the same as without a stop: True" in out
