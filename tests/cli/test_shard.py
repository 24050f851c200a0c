"""`tensorcom shard`: a run SIGKILLed mid-way (a real subprocess) resumed to every sample once with the
finished shards untouched; FILE.py:FUNC input; clear one-line errors for a bad input and a changed one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tensorcom import shards
from tensorcom.cli.shard import main

pytestmark = pytest.mark.procs

GENERATOR = textwrap.dedent('''
    import os
    import signal

    PASSES = []

    def samples():
        """40 samples; with $KILL_AT=K the process kills itself (SIGKILL) at sample K of its writing pass
        (the first pass counts and fingerprints)."""
        PASSES.append(1)
        for i in range(40):
            if len(PASSES) == 2 and i == int(os.environ.get("KILL_AT", "-1")):
                os.kill(os.getpid(), signal.SIGKILL)
            yield {"__key__": f"s{i:03d}", "txt": f"sample {i}", "cls": i % 4}
''')


def run_shard(args: list[str], cwd, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorcom", "shard", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env})


def test_sigkill_mid_way_then_resume_keeps_finished_shards(tmp_path):
    (tmp_path / "gen.py").write_text(GENERATOR)
    args = ["gen.py:samples", "-o", "out/s-%04d.tar", "--maxcount", "5", "-q"]
    killed = run_shard(args, tmp_path, KILL_AT="23")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    finished = sorted(p for p in os.listdir(tmp_path / "out") if p.endswith(".tar"))
    assert finished == [f"s-{n:04d}.tar" for n in range(4)]  # samples 0..19; shard 4 was being written
    before = {name: os.stat(tmp_path / "out" / name) for name in finished}
    resumed = run_shard([*args, "--resume"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "40 samples in 8 shards (4 kept)" in resumed.stdout
    for name, st in before.items():
        now = os.stat(tmp_path / "out" / name)
        assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    paths = sorted(str(p) for p in (tmp_path / "out").glob("*.tar"))
    assert [s["__key__"] for s in shards.samples(paths)] == [f"s{i:03d}" for i in range(40)]
    assert not [p for p in os.listdir(tmp_path / "out") if p.startswith(".")]


def test_function_input_in_process(tmp_path, capsys, monkeypatch):
    (tmp_path / "gen_inproc.py").write_text(GENERATOR)
    monkeypatch.chdir(tmp_path)
    assert main(["gen_inproc.py:samples", "-o", "out/g-%02d.tar", "--maxcount", "16", "-q"]) == 0
    assert "40 samples in 3 shards, manifest out/g.manifest.json" in capsys.readouterr().out
    first = next(iter(shards.samples("out/g-00.tar")))
    assert (first["__key__"], first["txt"], first["cls"]) == ("s000", b"sample 0", b"0")


@pytest.mark.parametrize("spec, words", [("/no/such/folder", "/no/such/folder"),
                                         ("missing.parquet", "missing.parquet"),
                                         ("no_such_module_x:f", "cannot load input function")])
def test_a_bad_input_is_one_line_and_status_2(tmp_path, capsys, spec, words):
    with pytest.raises(SystemExit) as exit_:
        main([spec, "-o", str(tmp_path / "x-%03d.tar")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and words in err


def test_a_bad_sample_stops_with_one_line_and_leaves_no_partial_shard(tmp_path, capsys, monkeypatch):
    (tmp_path / "gen_bad.py").write_text("def samples():\n    for i in range(12):\n"
                                         "        yield {'__key__': 'a.b' if i == 7 else f'k{i}', 'txt': 'x'}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["gen_bad.py:samples", "-o", "out/b-%02d.tar", "--maxcount", "5", "-q"])
    assert exit_.value.code == 2 and "'a.b'" in capsys.readouterr().err
    assert sorted(os.listdir("out")) == ["b-00.tar", "b.manifest.json"]


def test_resume_against_a_changed_folder_is_refused(tmp_path, capsys):
    for name in ("a", "b"):
        (tmp_path / "in" / name).mkdir(parents=True)
        (tmp_path / "in" / name / "1.jpg").write_bytes(b"jpeg " + name.encode())
    args = [str(tmp_path / "in"), "-o", str(tmp_path / "out" / "t-%03d.tar"), "--maxcount", "1", "-q"]
    assert main(args) == 0
    (tmp_path / "in" / "b" / "2.jpg").write_bytes(b"a new image")
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--resume"])
    assert exit_.value.code == 2 and "the input changed" in capsys.readouterr().err


def test_the_data_shard_example(tmp_path):
    """examples/data_shard.py (docs/data.md, "Converting: tensorcom shard") runs as a user runs it."""
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data_shard.py")
    done = subprocess.run([sys.executable, example, "--dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "36 images in 4 shards" in done.stdout and "resumed: 3 shards kept, 1 written again" in done.stdout
    assert "read back: 36 samples, 36 distinct keys, original bytes and classes: True" in done.stdout
    assert "a training batch: images (8, 8, 8, 3) uint8" in done.stdout


def test_maxsize_takes_byte_counts_with_units():
    import argparse

    from tensorcom.cli.shard import byte_size

    assert (byte_size("3e9"), byte_size("500M"), byte_size("2g"), byte_size("1500")) == (3e9, 5e8, 2e9, 1500.0)
    for bad in ("abc", "0", "-5M", "1.2.3"):
        with pytest.raises(argparse.ArgumentTypeError, match="positive byte count"):
            byte_size(bad)
