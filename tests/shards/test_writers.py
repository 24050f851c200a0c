"""TarWriter / ShardWriter: deterministic archives, encodings, destinations, and WebDataset interop."""

from __future__ import annotations

import gzip
import io
import tarfile

import numpy as np
import pytest

from tensorcom.errors import OpenError
from tensorcom.shards import ShardWriter, TarWriter, samples
from tensorcom.shards._tarpack import CHUNK, Headers
from tensorcom.shards._tarstream import buffered, tar_members


def some_samples(n=5):
    return [{"__key__": f"s{i:03d}", "txt": f"text {i}", "cls": i, "bin": bytes([i]) * i,
             "json": {"i": i}, "npy": np.full(3, i, np.int32)} for i in range(n)]


def write_bytes(items, **options) -> bytes:
    out = io.BytesIO()
    with TarWriter(out, **options) as writer:
        for sample in items:
            writer.write(sample)
    return out.getvalue()


def test_deterministic_sorted_members_fixed_metadata():
    first, second = write_bytes(some_samples()), write_bytes(some_samples())
    assert first == second
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[:6] == ["s000.bin", "s000.cls", "s000.json", "s000.npy", "s000.txt", "s001.bin"]
    assert {(m.mtime, m.uname, m.gname, m.uid, m.gid, m.mode) for m in members} == {
        (0, "bigdata", "bigdata", 0, 0, 0o444)}


def tarfile_archive(members, **attributes) -> bytes:
    """What Python's tarfile writes in stream mode for `members` [(name, bytes)] with `attributes`."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            for attribute, value in {"uid": 0, "gid": 0, **attributes}.items():
                setattr(info, attribute, value)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize("attributes", [
    dict(mtime=0, uname="bigdata", gname="bigdata", mode=0o444),
    dict(mtime=1234567, uname="me", gname="us", mode=0o640),
    dict(mtime=0, uname="ü" * 3, gname="g" * 40, mode=0o444),  # owner names that need pax records
])
def test_headers_and_archives_are_what_tarfile_writes(attributes):
    items = [{"__key__": f"dir/k{i}", "cls": i, "jpg": bytes([i]) * (i * 211)} for i in range(6)]
    items += [{"__key__": "é" * 4, "txt": b"non-ascii name"}, {"__key__": "k" * 120, "txt": b""},
              {"__key__": "n" * 96, "txt": b"a name of exactly 100 bytes"}, {"__key__": "big", "bin": bytes(CHUNK + 7)}]
    members = [(f"{s['__key__']}.{field}", str(value).encode() if isinstance(value, int) else value)
               for s in items for field, value in sorted(s.items()) if field != "__key__"]
    headers = Headers(mtime=attributes["mtime"], user=attributes["uname"], group=attributes["gname"],
                      mode=attributes["mode"])
    reference = tarfile_archive(members, **attributes)
    offset = 0
    for name, data in members:  # every header is tarfile's, whether joined from pieces or not
        header = headers(name, len(data))
        assert reference[offset:offset + len(header)] == header, name
        offset += len(header) + len(data) + (-len(data) % 512)
    out = io.BytesIO()
    with TarWriter(out, mtime=attributes["mtime"], user=attributes["uname"], group=attributes["gname"],
                   mode=attributes["mode"]) as writer:
        for sample in items:
            writer.write(sample)
    assert out.getvalue() == reference and writer.size == len(reference)
    assert gzip.decompress(write_bytes(items, compress=True, mtime=attributes["mtime"], user=attributes["uname"],
                                       group=attributes["gname"], mode=attributes["mode"])) == reference


@pytest.mark.parametrize("size", [8 ** 11 - 1, 8 ** 11, 20 * 2 ** 30])  # the last ustar size, then pax sizes
def test_headers_of_the_largest_members_are_what_tarfile_writes(size):
    """Headers only (no data is written): the joined ustar header of the largest size it can hold, and
    the pax header of 8 GiB and more, against a header tarfile writes for the same member."""
    info = tarfile.TarInfo("big.bin")
    info.size, info.mtime, info.mode, info.uname, info.gname = size, 0, 0o444, "bigdata", "bigdata"
    assert Headers()("big.bin", size) == info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def test_gzip_archives_are_deterministic(tmp_path):
    for name in ("a.tgz", "b.tar.gz"):
        with TarWriter(str(tmp_path / name)) as writer:
            for sample in some_samples():
                writer.write(sample)
    data = (tmp_path / "a.tgz").read_bytes()
    assert data[:2] == b"\x1f\x8b" and data == (tmp_path / "b.tar.gz").read_bytes()
    got = list(samples(str(tmp_path / "a.tgz")))
    assert [s["txt"] for s in got] == [f"text {i}".encode() for i in range(5)]


def test_values_encoded_by_extension_and_meta_fields():
    data = write_bytes([{"__key__": "k", "__url__": "dropped", "_private": "x", "cls": 3, "txt": "ü"}])
    members = dict(tar_members(buffered(io.BytesIO(data), "m"), "m"))
    assert members == {"k.cls": b"3", "k.txt": "ü".encode()}
    kept = write_bytes([{"__key__": "k", "_note": "kept"}], keep_meta=True)
    assert dict(tar_members(buffered(io.BytesIO(kept), "m"), "m")) == {"k._note": b"kept"}


def test_bad_samples():
    out = io.BytesIO()
    with TarWriter(out) as writer:
        with pytest.raises(ValueError, match="__key__"):
            writer.write({"txt": "no key"})
        with pytest.raises(ValueError, match="dot"):
            writer.write({"__key__": "a.b", "txt": "x"})
        with pytest.raises(TypeError):
            writer.write({"__key__": "a", "weird": object()})
        with pytest.raises(ValueError, match="'k9' has ''"):
            writer.write({"__key__": "k9", "": b"x"})
    with pytest.raises(TypeError):
        TarWriter(42)
    with pytest.raises(TypeError, match="encode=False"):
        write_bytes([{"__key__": "a", "cls": 1}], encode=False)


def test_shard_writer_counts_only_written_samples(tmp_path):
    with ShardWriter(str(tmp_path / "c-%03d.tar"), maxcount=10) as sink:
        sink.write({"__key__": "a", "txt": "ok"})
        with pytest.raises(TypeError):
            sink.write({"__key__": "b", "weird": object()})
        assert sink.total == 1


def test_shard_writer_maxcount_maxsize_and_post(tmp_path):
    closed = []
    with ShardWriter(str(tmp_path / "c-%04d.tar"), maxcount=4, post=closed.append) as writer:
        for sample in some_samples(10):
            writer.write(sample)
    assert [p.rsplit("/", 1)[1] for p in writer.shards] == ["c-0000.tar", "c-0001.tar", "c-0002.tar"]
    assert closed == writer.shards and writer.total == 10
    got = list(samples(writer.shards))
    assert [s["__key__"] for s in got] == [f"s{i:03d}" for i in range(10)]
    with ShardWriter(str(tmp_path / "z-%d.tar"), maxsize=5000) as sized:
        for i in range(10):
            sized.write({"__key__": f"k{i}", "bin": bytes(2000)})
    assert len(sized.shards) == 5  # 2 samples (2 * 2560 bytes of tar) fill 5000 bytes
    with pytest.raises(ValueError, match="%"):
        ShardWriter(str(tmp_path / "no-pattern.tar"))


def test_pipe_and_fsspec_destinations(tmp_path):
    target = tmp_path / "piped.tar"
    with TarWriter(f"pipe:cat > {target}") as writer:
        writer.write({"__key__": "p", "txt": "piped"})
    assert [s["txt"] for s in samples(str(target))] == [b"piped"]
    with pytest.raises(OpenError, match="status 4"):
        with TarWriter("pipe:cat > /dev/null; exit 4") as writer:
            writer.write({"__key__": "p", "txt": "x"})
    with ShardWriter("memory://tc-writers/m-%02d.tar", maxcount=2) as writer:
        for sample in some_samples(3):
            writer.write(sample)
    assert writer.shards == ["memory://tc-writers/m-00.tar", "memory://tc-writers/m-01.tar"]
    assert [s["cls"] for s in samples(writer.shards)] == [b"0", b"1", b"2"]


def test_webdataset_reads_ours_and_we_read_theirs(tmp_path):
    wds = pytest.importorskip("webdataset")
    items = some_samples(7) + [{"__key__": "dir/long" + "x" * 120, "seg.txt": "long name", "txt.gz": "gz"}]
    for name in ("ours.tar", "ours.tgz"):
        with TarWriter(str(tmp_path / name)) as writer:
            for sample in items:
                writer.write(sample)
    for name in ("theirs.tar", "theirs.tgz"):
        with wds.TarWriter(str(tmp_path / name)) as writer:
            for sample in items:
                writer.write(dict(sample))
    for name in ("ours.tar", "ours.tgz", "theirs.tar", "theirs.tgz"):
        url = str(tmp_path / name)
        theirs = [{k: v for k, v in s.items() if k != "__local_path__"}
                  for s in wds.WebDataset(url, shardshuffle=False)]
        ours = list(samples(url))
        assert ours == theirs and len(ours) == 8, name
    assert gzip.decompress(ours[-1]["txt.gz"]) == b"gz"
