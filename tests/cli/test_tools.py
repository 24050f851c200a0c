"""tensormon / tensorstat / tensorshow as real subprocesses against a real publishing process; the
arguments they refuse (exit 2, one line), each tool's main run in this process."""

import importlib
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.net, pytest.mark.procs]

PUBLISHER = """
import sys, time, numpy as np
from tensorcom.transport.connection import Connection
with Connection(sys.argv[1]) as conn:
    images = np.arange(8 * 16 * 16 * 3, dtype=np.uint32).reshape(8, 16, 16, 3) % 256
    batch = {"images": images.astype(np.uint8), "labels": np.arange(8, dtype=np.int32)}
    if sys.argv[2] == "keyed":  # keys and a non-image array first, float NCHW images, class names
        batch = {"__key__": [f"s{i}" for i in range(8)], "mean": np.zeros((8, 3), np.float32),
                 "cls": np.arange(8, dtype=np.int32) % 2,
                 "image": (images.transpose(0, 3, 1, 2) / 255.0).astype(np.float32),
                 "__classes__": ["cat", "dog"]}
    deadline = time.time() + 60
    while time.time() < deadline:
        conn.send(list(batch.values()) if sys.argv[2] == "list" else batch)
        time.sleep(0.005)
"""


def tool(name):
    """The command that runs a tool: its console script if installed, else `python -m`."""
    script = os.path.join(os.path.dirname(sys.executable), name)
    return [script] if os.path.exists(script) else [sys.executable, "-m", f"tensorcom.cli.{name}"]


def run(name, *args, timeout=60):
    return subprocess.run([*tool(name), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def publisher(popen, free_port):
    """Start a process publishing batches on a fresh port; call with "list", "dict" or "keyed"; returns the URL."""

    def start(form="list"):
        port = free_port()
        popen.python("-c", PUBLISHER, f"zpub://127.0.0.1:{port}", form)
        return f"zsub://127.0.0.1:{port}"

    return start


def test_tensormon_reports_and_exits_after_count(publisher):
    url = publisher()
    out = run("tensormon", url, "--count", "30", "--report", "0.05", "--timeout", "30")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines and all("batches/s" in line and "samples/s" in line and "MB/s" in line for line in lines)
    assert lines[-1].endswith("total 30") and "batch 8" in lines[-1] and "dropped" in lines[-1]
    out = run("tensormon", url, "--count", "5", "--json", "--timeout", "30")
    assert out.returncode == 0, out.stderr
    last = json.loads(out.stdout.splitlines()[-1])
    assert last["batches"] == 5 and last["batch_size"] == 8 and last["samples_per_s"] > 0


def test_tensorstat_prints_each_input(publisher):
    out = run("tensorstat", publisher(), "--count", "3", "--timeout", "30")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "3 batches"
    assert lines[1].startswith("0: dtype uint8 shapes (8, 16, 16, 3) min 0 max 255")
    assert lines[2] == "1: dtype int32 shapes (8,) min 0 max 7 mean 3.5 std 2.29129"


def test_tensorshow_writes_a_grid(publisher, tmp_path):
    from PIL import Image

    url = publisher("dict")
    path = tmp_path / "grid.png"
    out = run("tensorshow", url, "-o", str(path), "--fields", "images,labels", "--timeout", "30")
    assert out.returncode == 0, out.stderr
    with Image.open(path) as image:
        assert image.size == (3 * 18, 3 * (16 + 14 + 2))  # 8 images: 3 x 3 cells with titles
    path2 = tmp_path / "pairs.png"
    out = run("tensorshow", url, "-o", str(path2), "--mode", "img2img", "--fields", "images,images",
              "--count", "4", "--timeout", "30")
    assert out.returncode == 0, out.stderr
    with Image.open(path2) as image:
        assert image.size == (2 * 34, 2 * 32)


def test_tensorshow_picks_the_image_field_and_class_names(publisher, tmp_path):
    from PIL import Image

    url = publisher("keyed")
    path = tmp_path / "grid.png"
    out = run("tensorshow", url, "-o", str(path), "--timeout", "30")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("images from field 'image', titles from 'cls' (class names from __classes__)")
    with Image.open(path) as image:
        assert image.size == (3 * 18, 3 * (16 + 14 + 2))
    names = tmp_path / "classes.txt"
    names.write_text("zero\none\n")
    out = run("tensorshow", url, "-o", str(path), "--classes", str(names), "--fields", "image,cls", "--timeout", "30")
    assert out.returncode == 0 and out.stdout.strip().endswith("(class names from --classes)"), out.stderr
    out = run("tensorshow", publisher(), "-o", str(path), "--timeout", "30")  # a list batch: field 0, labels 1
    assert out.returncode == 0 and out.stdout.strip().endswith("images from field '0', titles from '1'"), out.stderr


def refusal(capsys, name: str, *args: str) -> str:
    """The one stderr line with which tool `name`'s main, run here, refuses `args` (exit status 2)."""
    with pytest.raises(SystemExit) as info:
        importlib.import_module(f"tensorcom.cli.{name}").main(list(args))
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("name", ["tensormon", "tensorstat", "tensorshow"])
def test_bad_url_and_unreachable_server_exit_2(name, free_port, tmp_path, capsys):
    extra = ["-o", str(tmp_path / "x.png")] if name == "tensorshow" else []
    err = refusal(capsys, name, "zsub://127.0.0.1", *extra)
    assert "zsub://127.0.0.1" in err and "zpush" in err
    err = refusal(capsys, name, f"zsub://127.0.0.1:{free_port()}", "--timeout", "0.3", *extra)
    assert "nothing received within 0.3 s" in err


@pytest.mark.parametrize("name", ["tensormon", "tensorstat", "tensorshow"])
@pytest.mark.parametrize("option,value", [("--count", "0"), ("--timeout", "-1")])
def test_bad_option_values_are_one_line_and_exit_2(name, option, value, tmp_path, capsys):
    extra = ["-o", str(tmp_path / "x.png")] if name == "tensorshow" else []
    err = refusal(capsys, name, option, value, *extra)
    assert option in err and value in err
