"""A shard says when it is incomplete: cut at any byte, empty, through gzip, HTTP, S3 and pipe:.

Every in-memory test runs with the C scanner and with the pure-Python one.
"""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from tensorcom import shards
from tensorcom.errors import OpenError, TarFormatError
from tensorcom.shards import _tarscan as tarscan
from tensorcom.shards import _tarstream as tarstream
from tensorcom.shards._tarstream import buffered, shard_samples, tar_members
from tensorcom.shards.handlers import SkipCounts, ignore_and_continue

LONG_KEY = "d" * 60 + "/" + "k" * 70  # longer than a ustar name field: a pax path record


pytestmark = pytest.mark.usefixtures("tar_scanner")  # every test: C scanner, then pure Python


def pax_shard(count: int = 3) -> tuple[bytes, int]:
    """A shard as WebDataset writes it (pax format, float mtime: a pax header per member) and the
    offset just past its two end-of-archive blocks (tarfile pads the rest to a 10240-byte record)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(count):
            key = LONG_KEY if i == 1 else f"s{i}"
            for ext, data in (("cls", b"%d" % i), ("jpg", bytes([i % 256]) * (700 + 300 * (i % 7)))):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size, info.mtime = len(data), 1700000000.25
                tar.addfile(info, io.BytesIO(data))
        end = out.tell() + 1024  # the end blocks are written on close
    return out.getvalue(), end


def read_all(data: bytes, window: int = 1 << 21, **options) -> list:
    return list(tar_members(buffered(io.BytesIO(data), "cut.tar"), "cut.tar", window, **options))


def test_whole_shard_reads_and_every_cut_before_its_end_blocks_is_an_error():
    data, end = pax_shard()
    whole = read_all(data)
    assert [name for name, _ in whole] == ["s0.cls", "s0.jpg", f"{LONG_KEY}.cls", f"{LONG_KEY}.jpg",
                                           "s2.cls", "s2.jpg"]
    assert read_all(data[:end]) == whole
    for cut in range(end):
        for window in (1 << 16, 1536):
            with pytest.raises(TarFormatError) as info:
                read_all(data[:cut], window)
            assert info.value.url == "cut.tar", cut


def test_cuts_at_member_boundaries_are_accepted_only_on_request():
    data, end = pax_shard()
    whole = read_all(data)
    boundaries = [1024 + 512 * 2, end - 1024, end - 512]  # after s0.cls, before and between the end blocks
    for cut in boundaries:
        with pytest.raises(TarFormatError, match="truncated tar archive"):
            read_all(data[:cut])
    assert read_all(data[:end - 1024], require_end_blocks=False) == whole
    assert read_all(data[:end - 512], require_end_blocks=False) == whole
    with pytest.raises(TarFormatError, match="truncated member"):
        read_all(data[:end - 1100], require_end_blocks=False)


def test_empty_shard_is_an_error_or_a_counted_skip(tmp_path):
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    with pytest.raises(TarFormatError, match="empty") as info:
        list(shards.samples(str(empty)))
    assert info.value.url == str(empty)
    counts = SkipCounts()
    assert list(shards.samples(str(empty), handler=ignore_and_continue, counts=counts)) == []
    assert counts.shards == 1
    assert list(shard_samples(str(empty), require_end_blocks=False)) == []


def test_truncated_shard_keeps_earlier_samples_under_a_skip_policy(tmp_path):
    data, end = pax_shard()
    good, cut = tmp_path / "good.tar", tmp_path / "cut.tar"
    good.write_bytes(data)
    cut.write_bytes(data[:end - 1024])
    counts = SkipCounts()
    got = list(shards.samples([str(cut), str(good)], handler=ignore_and_continue, counts=counts))
    assert [s["__key__"] for s in got] == ["s0", LONG_KEY, "s0", LONG_KEY, "s2"]  # the cut shard's last sample is dropped
    assert counts.shards == 1 and "truncated tar archive" in counts.errors[0]


def test_gzip_of_a_cut_tar_and_a_cut_gzip_are_errors(tmp_path):
    data, end = pax_shard()
    inner = tmp_path / "inner-cut.tar.gz"
    inner.write_bytes(gzip.compress(data[:end - 1024]))
    with pytest.raises(TarFormatError, match="truncated tar archive") as info:
        list(shard_samples(str(inner)))
    assert info.value.url == str(inner)
    packed = gzip.compress(data)
    for cut in (len(packed) - 9, len(packed) // 2, 12):
        outer = tmp_path / f"outer-{cut}.tar.gz"
        outer.write_bytes(packed[:cut])
        with pytest.raises(TarFormatError):
            list(shard_samples(str(outer)))


def test_pipe_of_a_cut_shard_is_an_error(tmp_path):
    data, end = pax_shard()
    path = tmp_path / "whole.tar"
    path.write_bytes(data)
    url = f"pipe:head -c {end - 700} {path}"
    with pytest.raises(TarFormatError) as info:
        list(shard_samples(url))
    assert info.value.url == url
    assert len(list(shard_samples(f"pipe:head -c {end} {path}"))) == 3


@pytest.mark.net
def test_http_cut_file_and_cut_connection_are_errors(http_server):
    data, end = pax_shard()
    (http_server.root / "trunc-whole.tar").write_bytes(data)
    (http_server.root / "trunc-cut.tar").write_bytes(data[:end - 1024])
    assert len(list(shard_samples(f"{http_server.url}/trunc-whole.tar"))) == 3
    url = f"{http_server.url}/trunc-cut.tar"
    with pytest.raises(TarFormatError, match="truncated tar archive") as info:
        list(shard_samples(url))
    assert info.value.url == url
    url = f"{http_server.url}/cut/{end - 1024}/trunc-whole.tar"  # Content-Length whole, body cut, every time
    with pytest.raises((OpenError, TarFormatError)) as info:
        list(shard_samples(url, retries=1, backoff=0.01))
    assert info.value.url == url


@pytest.mark.net
@pytest.mark.procs
def test_s3_cut_object_is_an_error(s3_server):
    data, end = pax_shard()
    client = s3_server.client()
    client.create_bucket(Bucket="trunc-test")
    client.put_object(Bucket="trunc-test", Key="whole.tar", Body=data)
    client.put_object(Bucket="trunc-test", Key="cut.tar", Body=data[:end - 512])
    assert len(list(shard_samples("s3://trunc-test/whole.tar"))) == 3
    with pytest.raises(TarFormatError, match="one end-of-archive block of two") as info:
        list(shard_samples("s3://trunc-test/cut.tar"))
    assert info.value.url == "s3://trunc-test/cut.tar"


def test_pax_members_stay_on_the_fast_path(monkeypatch):
    """WebDataset-style shards (a pax header per member) are read by the scanner: the careful parser
    sees only what crosses a window's edge and the end, and refills move at most what they read."""
    data, _ = pax_shard(400)
    careful, moved, read = [], [], []
    one_member, fill = tarstream._one_member, tarscan.Window.fill

    def counting_one_member(*args, **kwargs):
        careful.append(1)
        return one_member(*args, **kwargs)

    def counting_fill(self):
        moved.append(self.end - self.pos)
        read.append(fill(self))
        return read[-1]

    monkeypatch.setattr(tarstream, "_one_member", counting_one_member)
    monkeypatch.setattr(tarscan.Window, "fill", counting_fill)
    window = 64 * 1024
    assert len(read_all(data, window)) == 800
    assert len(careful) <= 2 * (len(data) // (window // 2) + 2)
    assert all(m <= r for m, r in zip(moved, read) if r)
