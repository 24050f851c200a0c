"""The `tensorcom` umbrella as `python -m tensorcom`, and one-line usage errors with "did you mean"
across the tools, each run as a real subprocess."""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_tools import run as run_tool  # the tool's console script, or python -m


def run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorcom", *args], capture_output=True, text=True, timeout=60)


def test_python_dash_m_tensorcom_runs_the_umbrella():
    out = run_module("version")
    assert out.returncode == 0 and out.stdout.strip()
    from tensorcom import __version__

    assert out.stdout.strip() == __version__
    out = run_module("--help")
    assert out.returncode == 0 and "demo" in out.stdout and "serve" in out.stdout


@pytest.mark.parametrize("args,expected", [
    (["demoo"], "did you mean 'demo'?"),
    (["verison"], "did you mean 'version'?"),
    ([], "missing SUBCOMMAND"),
])
def test_umbrella_usage_errors_are_one_line(args, expected):
    out = run_module(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and expected in out.stderr
    assert out.stderr.startswith("tensorcom: error:")


@pytest.mark.parametrize("name,args,expected", [
    ("wl-info", ["x.tar", "--cout", "3"], "did you mean '--count'?"),
    ("wl-info", ["x.tar", "-d", "rgb9"], "did you mean 'rgb'?"),
    ("wl-cat", [], "required"),
    ("wl-map", ["x.tar"], "required"),
    ("tensormon", ["--rport", "1"], "did you mean '--report'?"),
    ("tensorshow", ["-o", "x.png", "--mode", "imgclas"], "did you mean 'imgclass'?"),
    ("serve-imagenet-dir", ["--batchsize", "3"], "did you mean '--batch-size'?"),
])
def test_tool_usage_errors_are_one_line(name, args, expected):
    out = run_tool(name, *args)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith(f"{name}: error:") and expected in out.stderr
