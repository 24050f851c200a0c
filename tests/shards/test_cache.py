"""The local shard cache (cache_dir=) against the real HTTP test server and real pipes: the first read
fills the cache, later reads do not reach the server, and a broken download never becomes an entry."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tensorcom.errors import OpenError
from tensorcom.shards import TarWriter, samples
from tensorcom.shards.cache import DRAIN_LIMIT, cache_path
from tensorcom.shards.gopen import gopen


def write_shard(path, count: int = 5, prefix: str = "s") -> list[dict]:
    """A tar shard of `count` samples {cls, npy} at `path`; returns what was written."""
    written = [{"__key__": f"{prefix}{i:03d}", "cls": i, "npy": np.full(50, i, np.int32)} for i in range(count)]
    with TarWriter(str(path)) as sink:
        for sample in written:
            sink.write(sample)
    return written


def entries(cache_dir) -> list[str]:
    """Every file in the cache directory (entries and temporary files alike)."""
    return sorted(os.listdir(cache_dir)) if os.path.isdir(cache_dir) else []


def test_second_read_comes_from_the_cache(http_server, tmp_path):
    payload = os.urandom(300_000)
    (http_server.root / "cached.bin").write_bytes(payload)
    url, cache = f"{http_server.url}/cached.bin", tmp_path / "cache"
    with gopen(url, cache_dir=cache) as stream:
        assert stream.read() == payload
    assert http_server.requests["/cached.bin"] == 1
    assert entries(cache) == [os.path.basename(cache_path(url, cache))]
    with gopen(url, cache_dir=cache) as stream:
        assert stream.read() == payload
    assert http_server.requests["/cached.bin"] == 1  # the server saw no second request


def test_samples_read_through_the_cache(http_server, tmp_path):
    written = write_shard(http_server.root / "cache-shard.tar")
    url, cache = f"{http_server.url}/cache-shard.tar", tmp_path / "cache"
    first = list(samples(url, cache_dir=str(cache)))
    second = list(samples(url, cache_dir=str(cache)))
    assert http_server.requests["/cache-shard.tar"] == 1
    assert [s["__key__"] for s in first] == [s["__key__"] for s in written]
    assert [(s["__key__"], s["cls"], s["npy"]) for s in first] == [
        (s["__key__"], s["cls"], s["npy"]) for s in second]
    assert all(s["__url__"] == url for s in second)  # samples name the URL, not the cache file


def test_a_cut_download_leaves_no_entry(http_server, tmp_path):
    (http_server.root / "cut.bin").write_bytes(os.urandom(200_000))
    url, cache = f"{http_server.url}/cut/5000/cut.bin", tmp_path / "cache"
    with pytest.raises(OpenError, match="broke"), gopen(url, cache_dir=cache, retries=1, backoff=0.01) as stream:
        stream.read()
    assert entries(cache) == []  # neither an entry nor a temporary file
    with pytest.raises(OpenError):  # and the next read goes to the server again
        gopen(url, cache_dir=cache, retries=0).read()
    assert http_server.requests["/cut/5000/cut.bin"] == 3


def test_a_resumed_download_is_a_whole_entry(http_server, tmp_path):
    payload = os.urandom(400_000)
    (http_server.root / "dropped.bin").write_bytes(payload)
    url, cache = f"{http_server.url}/drop/dropped.bin", tmp_path / "cache"
    assert gopen(url, cache_dir=cache, backoff=0.01).read() == payload  # dropped once, resumed by Range
    with open(cache_path(url, cache), "rb") as entry:
        assert entry.read() == payload


def test_a_reader_closing_early(http_server, tmp_path):
    """A few bytes left unread are read on close (the tar reader stops before the padding); a reader
    that abandons most of a download leaves no entry."""
    small, big = os.urandom(100_000), os.urandom(DRAIN_LIMIT + 3_000_000)
    (http_server.root / "small.bin").write_bytes(small)
    (http_server.root / "big.bin").write_bytes(big)
    cache = tmp_path / "cache"
    with gopen(f"{http_server.url}/small.bin", cache_dir=cache, bufsize=4096) as stream:
        assert stream.read(1000) == small[:1000]
    with open(cache_path(f"{http_server.url}/small.bin", cache), "rb") as entry:
        assert entry.read() == small
    with gopen(f"{http_server.url}/big.bin", cache_dir=cache, bufsize=4096) as stream:
        assert stream.read(1000) == big[:1000]
    assert entries(cache) == [os.path.basename(cache_path(f"{http_server.url}/small.bin", cache))]


def test_pipes_are_cached_and_local_files_are_not(tmp_path):
    source, cache = tmp_path / "data.bin", tmp_path / "cache"
    source.write_bytes(b"piped bytes")
    url = f"pipe:cat {source}"
    assert gopen(url, cache_dir=cache).read() == b"piped bytes"
    source.unlink()  # the command would now fail: the cache answers
    assert gopen(url, cache_dir=cache).read() == b"piped bytes"
    with pytest.raises(OpenError, match="status 3"):
        gopen("pipe:echo partial; exit 3", cache_dir=cache).read()
    assert entries(cache) == [os.path.basename(cache_path(url, cache))]
    local = tmp_path / "local.bin"
    local.write_bytes(b"local")
    assert gopen(str(local), cache_dir=tmp_path / "other").read() == b"local"
    assert entries(tmp_path / "other") == []


def test_cache_names_are_safe_and_distinct(tmp_path):
    names = {cache_path(url, tmp_path) for url in (
        "http://a/x/train-0.tar", "http://b/x/train-0.tar", "pipe:curl -s 'http://a/x?y=1' | cat",
        "s3://bucket/../../etc/passwd")}
    assert len(names) == 4
    for name in names:
        assert os.path.dirname(name) == str(tmp_path)
        assert "/" not in os.path.basename(name) and not os.path.basename(name).startswith(".")
    assert cache_path("http://a/x/train-0.tar", tmp_path).endswith("-train-0.tar")


class _ReadOnly:
    """A remote stream with read() and close() only (no readinto), as some fsspec files are."""

    def __init__(self, data: bytes, chunk: int = 1000):
        self.data, self.pos, self.chunk, self.closed = data, 0, chunk, False

    def read(self, count: int = -1) -> bytes:
        count = min(count, self.chunk)
        piece = self.data[self.pos:self.pos + count]
        self.pos += len(piece)
        return piece

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("with_readinto", [False, True])
def test_caching_reader_copies_every_byte(tmp_path, with_readinto):
    import io

    from tensorcom.shards.cache import open_cached

    data = bytes(range(256)) * 40
    opened = []

    def open_remote():
        opened.append(io.BytesIO(data) if with_readinto else _ReadOnly(data))
        return opened[-1]

    url = "http://example.invalid/x.tar"
    with open_cached(url, tmp_path, open_remote, bufsize=4096) as stream:
        assert stream.read() == data
    assert opened[0].closed
    with open(cache_path(url, tmp_path), "rb") as entry:
        assert entry.read() == data
