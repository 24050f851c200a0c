"""./run's install levels, on a copy of the script with a stand-in Python that records what pip is asked:
`./run demo`'s level installs only what the demo uses; the full level (./run test) adds the rest to the same
.venv; each level installs once, a full install serves the demo level too, and changing pyproject.toml
makes the next run install again."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKE_PYTHON = """#!/bin/sh
# stands in for python3 and, once copied, for .venv/bin/python: `-m venv DIR` makes DIR/bin/python,
# anything else is written to the log
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; exit 0; fi
echo "$*" >> "$RUN_LOG"
"""


@pytest.fixture
def project(tmp_path) -> Path:
    """A folder with ./run, the files whose changes make it install again, a stand-in python3 and nft."""
    shutil.copy(ROOT / "run", tmp_path / "run")
    for name in ("pyproject.toml", "constraints.txt", "setup.py", "src/tensorcom/shards/_ctarscan.c"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, text in (("python3", FAKE_PYTHON), ("nft", "#!/bin/sh\n")):  # nft there: no apt-get
        (tools / name).write_text(text)
        (tools / name).chmod(0o755)
    return tmp_path


def setup(project: Path, level: str) -> list[str]:
    """`./run setup LEVEL`; the pip commands it ran (the log's new lines)."""
    log = project / "pip.log"
    before = log.read_text().splitlines() if log.exists() else []
    env = {**os.environ, "PYTHON": str(project / "tools" / "python3"), "RUN_LOG": str(log),
           "PATH": f"{project / 'tools'}:{os.environ['PATH']}"}
    subprocess.run([str(project / "run"), "setup", level], env=env, check=True, timeout=30)
    return log.read_text().splitlines()[len(before):] if log.exists() else []


def installs(commands: list[str]) -> list[str]:
    """What each pip command installs (its last argument)."""
    return [command.split()[-1] for command in commands]


def test_demo_level_then_full_level_then_nothing(project):
    assert installs(setup(project, "demo")) == ["torch==2.13.0", ".[images,progress,torch]"]
    assert setup(project, "demo") == []
    full = setup(project, "full")
    assert installs(full) == ["torch==2.13.0", "s3fs", ".[all,torch,keras,jax,ray,dev,bench]"]
    assert all("-c constraints.txt" in command for command in full)
    assert setup(project, "demo") == [] and setup(project, "full") == []


def test_a_full_install_serves_the_demo_and_a_changed_pyproject_installs_again(project):
    assert len(setup(project, "full")) == 3
    assert setup(project, "demo") == []
    stamp = project / ".venv" / ".installed-full"
    os.utime(project / "pyproject.toml", (stamp.stat().st_mtime + 5,) * 2)
    assert installs(setup(project, "demo")) == ["torch==2.13.0", ".[images,progress,torch]"]


def test_an_unknown_level_is_refused(project):
    done = subprocess.run([str(project / "run"), "setup", "everything"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "demo and full" in done.stderr
