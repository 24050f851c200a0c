"""extras.require: an optional dependency that cannot be imported raises MissingDependency naming the
extra to install; tools that need one exit at once with that one line (run as real subprocesses, with
the dependency made unimportable by `sys.modules[name] = None` before the tool's main runs)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tensorcom.errors import MissingDependency, TensorcomError
from tensorcom.extras import EXTRAS, install_hint, require

# runs a tool's main with some modules unimportable: argv = [module names (comma-separated), "pkg.mod:fn", prog, ARGS...]
WITHOUT = """
import importlib, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
module, function = sys.argv[2].split(":")
sys.argv = sys.argv[3:]
sys.exit(getattr(importlib.import_module(module), function)(sys.argv[1:]))
"""


def run_without(modules: str, entry: str, prog: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT, modules, entry, prog, *args],
                          capture_output=True, text=True, timeout=60)


def test_require_returns_the_module():
    import numpy  # noqa: F401  (not an extra: refused)

    assert require("PIL").__name__ == "PIL"
    with pytest.raises(ValueError, match="numpy"):
        require("numpy")


@pytest.mark.parametrize("module", sorted(EXTRAS))
def test_missing_module_names_its_extra(module, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependency) as info:
        require(module)
    extra = EXTRAS[module][1]
    assert str(info.value) == install_hint(module) and f"pip install 'tensorcom[{extra}]'" in str(info.value)
    assert info.value.extra == extra and isinstance(info.value, (ImportError, TensorcomError))


def test_images_need_pillow(monkeypatch):
    from tensorcom.shards import decode_sample

    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(MissingDependency, match=r"tensorcom\[images\]"):  # not a SampleError: not bad data
        decode_sample({"__key__": "k", "png": b"\x89PNG\r\n\x1a\n"}, image="rgb8")


@pytest.mark.parametrize("entry,prog,args", [
    ("tensorcom.cli.tensorshow:main", "tensorshow", ["zsub://127.0.0.1:9", "-o", "x.png", "--timeout", "30"]),
    ("tensorcom.cli.serve_imagenet:main_dir", "serve-imagenet-dir", ["-d", "/nonexistent"]),
    ("tensorcom.cli.main:main", "tensorcom demo", ["demo", "--timeout", "30"]),
])
def test_tools_without_pillow_exit_at_once_with_one_line(entry, prog, args):
    out = run_without("PIL", entry, prog.split()[0], *args)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == f"{prog}: error: needs Pillow: pip install 'tensorcom[images]'"


def test_wl_info_on_images_without_pillow(tmp_path):
    from tensorcom.shards import TarWriter

    shard = tmp_path / "s.tar"
    with TarWriter(str(shard)) as writer:
        writer.write({"__key__": "a", "png": b"\x89PNG\r\n\x1a\n", "cls": "1"})
    out = run_without("PIL,PIL.Image", "tensorcom.cli.wl_info:main", "wl-info", str(shard))
    assert out.returncode == 2 and out.stderr.strip() == "wl-info: error: needs Pillow: pip install 'tensorcom[images]'"
    assert run_without("PIL,PIL.Image", "tensorcom.cli.wl_info:main", "wl-info", str(shard), "-d", "none").returncode == 0
