"""`tensorcom prepare`: fills a decoded-image cache in worker processes, resumes, and the servers'
pipelines then map every image from it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import numpy as np

from tensorcom.cli.main import main
from tensorcom.imagecodec import encode_image
from tensorcom.pipeline._cache_store import EntryStore, entry_bytes


def write_tree(root, count=12):
    """root/c<i % 2>/<i>.jpg: `count` small JPEGs."""
    for i in range(count):
        (root / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        (root / f"c{i % 2}" / f"{i}.jpg").write_bytes(encode_image(np.full((24, 32, 3), i * 9, np.uint8), "jpg"))
    return root


def _dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=60)
    return proc.pid


def index_of(cache) -> str:
    """The index of the one cache directory under `cache`."""
    [index] = [os.path.join(d, "index.log") for d, _, names in os.walk(cache) if "index.log" in names]
    return index


def entries(cache) -> int:
    """How many keys the cache under `cache` holds."""
    return len(EntryStore(os.path.dirname(index_of(cache))))


def test_prepare_fills_resumes_and_the_server_only_maps_from_the_cache(tmp_path, capsys, free_port, popen):
    root = write_tree(tmp_path / "data" / "train")
    cache = tmp_path / "cache"
    assert main(["prepare", str(tmp_path / "data"), "--cache", str(cache), "-w", "2", "-q"]) == 0
    assert capsys.readouterr().out.strip() == "12 images: 12 stored, 0 already there, 0 did not fit"
    assert entries(cache) == 12
    index = index_of(cache)
    os.truncate(index, 7 * 64)  # an interrupted run: 5 entries were never indexed, one was half written
    torn = os.path.join(os.path.dirname(index), f"{socket.gethostname()}.{_dead_pid()}.0a1b2c3d4e5f6071.seg")
    with open(torn, "wb") as stream:
        stream.write(b"TcEntry1")
    assert main(["prepare", str(root), "--cache", str(cache), "-w", "0", "-q"]) == 0
    out = capsys.readouterr().out.strip()  # the torn segment, and the first run's with unindexed tails
    assert re.fullmatch(r"12 images: 5 stored, 7 already there, 0 did not fit; [23] segments of killed writers cut", out)
    segments = [size for path, size in sizes(cache).items() if path.endswith(".seg")]
    assert not os.path.exists(torn) and entries(cache) == 12 and sum(segments) == 12 * entry_bytes(np.zeros((24, 32, 3), np.uint8))
    before = sizes(cache)

    for jpeg in root.glob("*/*.jpg"):  # same size and time, bytes no decoder takes: only the cache can serve
        status = jpeg.stat()
        jpeg.write_bytes(b"\0" * status.st_size)
        os.utime(jpeg, ns=(status.st_atime_ns, status.st_mtime_ns))
    served = serve_one_epoch(tmp_path / "data", cache, free_port(), popen)
    assert sum(len(labels) for _, labels in served) == 12 and served[0][0].shape[1:] == (16, 16, 3)
    assert sizes(cache) == before  # nothing was decoded and stored again: every image came from the cache


def sizes(directory) -> dict[str, int]:
    return {os.path.join(d, n): os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(directory) for n in names}


def serve_one_epoch(root, cache, port, popen) -> list:
    """serve-imagenet-dir --cache CACHE (a real subprocess) -> one epoch of batches received here."""
    from tensorcom import Connection

    command = [sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", "-d", str(root), "-b", "4",
               "--size", "16", "--epochs", "1", "-r", "0", "--cache", str(cache), f"zpush://127.0.0.1:{port}"]
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        proc = popen.start(command, stderr=subprocess.PIPE, text=True)
        batches = list(conn)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    return batches


FACTORY = """
from tensorcom.images.folder import ImageFolderSource
from tensorcom.pipeline import Pipeline


def served(sample):
    return {{"image": sample["jpg"], "hit": int(sample["__cache__"] == "hit")}}


def make():
    return Pipeline(ImageFolderSource({root!r}, read=False)).cache(None).map(served).batch(6)
"""


def test_serve_gives_its_cache_directory_to_the_pipelines_cache_stage(tmp_path, free_port, popen):
    """`tensorcom serve --cache DIR` with a pipeline whose .cache() names no directory: the first
    epoch fills DIR, the second maps every image from it."""
    from tensorcom import Connection

    root = write_tree(tmp_path / "data")
    (tmp_path / "factory.py").write_text(FACTORY.format(root=str(root)))
    port, cache = free_port(), tmp_path / "cache"
    command = [sys.executable, "-m", "tensorcom.cli.main", "serve", f"{tmp_path / 'factory.py'}:make",
               "--cache", str(cache), "--epochs", "2", "-r", "0", f"zpush://127.0.0.1:{port}"]
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        proc = popen.start(command, stderr=subprocess.PIPE, text=True)
        first, second = list(conn), list(conn)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert entries(cache) == 12
    assert [int(b["hit"].sum()) for b in first] == [0, 0] and [int(b["hit"].sum()) for b in second] == [6, 6]
    assert first[0]["image"].shape[1:] == (24, 32, 3)
