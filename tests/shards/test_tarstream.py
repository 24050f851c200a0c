"""Our tar parser against Python's tarfile: formats, long names, gzip, grouping, and bad archives.

Every test runs twice, with the C scanner (tensorcom.shards._ctarscan) and with the pure-Python one, chosen
through $TENSORCOM_PURE_PYTHON as users choose it.
"""

from __future__ import annotations

import gzip
import io
import re
import tarfile
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorcom.errors import OpenError, SampleError, TarFormatError
from tensorcom.shards import _tarscan as tarscan
from tensorcom.shards._tarstream import buffered, group_samples, shard_samples, split_name, tar_members
from tensorcom.shards.handlers import SkipCounts, ignore_and_continue, warn_and_continue

pytestmark = pytest.mark.usefixtures("tar_scanner")  # every test: C scanner, then pure Python


def make_tar(members, fmt=tarfile.PAX_FORMAT, extra=None) -> bytes:
    """A tar archive of (name, bytes) members; `extra(tar)` may add special members."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if extra:
            extra(tar)
    return out.getvalue()


def members_of(data: bytes, url: str = "mem.tar", bufsize: int = 1 << 20, window: int = 1 << 21) -> list:
    return list(tar_members(buffered(io.BytesIO(data), url, bufsize), url, window))


def tarfile_members(data: bytes) -> list:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar if m.isreg()]


LONG = "dir" + "/sub" * 40 + "/" + "n" * 150 + ".seg.jpg"


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_formats_and_long_names_match_tarfile(fmt):
    names = [("a/b.seg.jpg", b"x" * 1000), ("a/b.cls", b"3"), ("p" * 90 + "/q" * 40 + ".txt", b"ustar prefix")]
    if fmt != tarfile.USTAR_FORMAT:
        names += [(LONG, b"long"), ("ünï/cödé.txt", "ü".encode())]
    data = make_tar(names, fmt)
    ours = members_of(data)
    assert ours == tarfile_members(data)
    assert ours == names


def test_skips_directories_links_and_metadata():
    def extra(tar):
        for name, kind in (("somedir", tarfile.DIRTYPE), ("link.txt", tarfile.SYMTYPE)):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "a.txt" if kind == tarfile.SYMTYPE else ""
            tar.addfile(info)

    data = make_tar([("__meta__", b"m"), ("__info__/x.json", b"{}"), ("a.txt", b"A")], extra=extra)
    assert members_of(data) == [("a.txt", b"A")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.text("abcxyz/é_-", min_size=1, max_size=120).filter(
    lambda s: not s.startswith("/") and not s.endswith("/") and "//" not in s),
    st.binary(max_size=3000)), max_size=8),
       st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]), st.sampled_from([512, 4096, 1 << 20]),
       st.sampled_from([512, 1024, 1536, 5000, 1 << 21]))
def test_random_archives_match_tarfile(members, fmt, bufsize, window):
    data = make_tar(members, fmt)
    expected = [m for m in tarfile_members(data) if not re.match(r"__[^/]*__($|/)", m[0])]  # metadata
    assert members_of(data, bufsize=bufsize, window=window) == expected


def test_member_larger_than_buffer_and_gzip():
    big = bytes(range(256)) * 12000  # ~3 MB
    data = make_tar([("big.bin", big), ("small.txt", b"s")])
    assert members_of(data, bufsize=65536) == [("big.bin", big), ("small.txt", b"s")]
    zipped = gzip.compress(data, mtime=0)
    assert members_of(zipped, bufsize=65536) == [("big.bin", big), ("small.txt", b"s")]
    # two concatenated gzip members read as one stream
    half = len(data) // 2
    twice = gzip.compress(data[:half]) + gzip.compress(data[half:])
    assert [name for name, _ in members_of(twice)] == ["big.bin", "small.txt"]
    # many small gzip members (as bgzip writes them), several in each read, then zero padding
    blocks = b"".join(gzip.compress(data[i:i + 5000], mtime=0) for i in range(0, len(data), 5000))
    assert members_of(blocks + b"\0" * 100, bufsize=65536) == [("big.bin", big), ("small.txt", b"s")]


def test_split_name():
    assert split_name("a/b.seg.JPG") == ("a/b", "seg.jpg")
    assert split_name("a.b/c.txt") == ("a.b/c", "txt")
    assert split_name("noext") is None
    assert split_name("d/.hidden") is None


def test_grouping_keys_and_extensions():
    data = make_tar([("a/b.seg.JPG", b"1"), ("a/b.cls", b"2"), ("a.b/c.txt", b"3"), ("noext", b"4"),
                     ("c.x.txt.gz", gzip.compress(b"z"))])
    samples = list(group_samples(iter(members_of(data)), "u.tar"))
    assert samples == [
        {"__key__": "a/b", "__url__": "u.tar", "seg.jpg": b"1", "cls": b"2"},
        {"__key__": "a.b/c", "__url__": "u.tar", "txt": b"3"},
        {"__key__": "c", "__url__": "u.tar", "x.txt.gz": gzip.compress(b"z")},
    ]


def test_repeated_extension_is_sample_error_or_skipped():
    members = [("k1.txt", b"a"), ("k1.txt", b"b"), ("k1.cls", b"1"), ("k2.txt", b"c")]
    with pytest.raises(SampleError, match="repeated") as info:
        list(group_samples(iter(members), "u.tar"))
    assert info.value.url == "u.tar" and info.value.member == "k1.txt"
    counts = SkipCounts()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = list(group_samples(iter(members), "u.tar", warn_and_continue, counts))
    assert [s["__key__"] for s in kept] == ["k2"]
    assert counts.samples == 1 and len(caught) == 1


def test_sample_never_spans_shards(tmp_path):
    for i in range(2):
        (tmp_path / f"s{i}.tar").write_bytes(make_tar([("same.txt", b"%d" % i)]))
    from tensorcom.shards import samples

    got = list(samples(str(tmp_path / "s{0..1}.tar")))
    assert [s["txt"] for s in got] == [b"0", b"1"]


def corrupt(data: bytes, offset: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ 0xFF]) + data[offset + 1:]


def test_bad_checksum_truncation_and_gzip_errors(tmp_path):
    data = make_tar([("a.txt", b"A" * 600), ("b.txt", b"B"), ("c.txt", b"C")], fmt=tarfile.USTAR_FORMAT)
    cases = {
        "checksum.tar": corrupt(data, 1536 + 5),  # the name of b.txt's header
        "truncated.tar": data[:1536 + 512 + 100],  # inside b.txt's data... header of b + 100
        "cut-header.tar": data[:1536 + 100],
        "corrupt.tgz": corrupt(gzip.compress(data), 40),
        "truncated.tgz": gzip.compress(data)[:-30],
    }
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        url = str(tmp_path / name)
        with pytest.raises(TarFormatError) as info:
            list(shard_samples(url))
        assert info.value.url == url, name
        if name in ("checksum.tar", "cut-header.tar"):
            assert info.value.member == "a.txt"
        if name == "truncated.tar":
            assert info.value.member == "b.txt"


def test_handler_keeps_good_samples_and_counts_bad_shard(tmp_path):
    data = make_tar([(f"k{i}.txt", b"x" * 700) for i in range(5)], fmt=tarfile.USTAR_FORMAT)
    (tmp_path / "bad.tar").write_bytes(data[: 3 * 1536 + 700])
    counts = SkipCounts()
    got = list(shard_samples(str(tmp_path / "bad.tar"), handler=ignore_and_continue, counts=counts))
    # k2 was the sample in progress when the archive broke: it may be incomplete, so it is dropped
    assert [s["__key__"] for s in got] == ["k0", "k1"]
    assert counts.as_dict() == {"samples": 0, "shards": 1}
    missing = str(tmp_path / "missing.tar")
    with pytest.raises(OpenError, match="missing.tar"):
        list(shard_samples(missing))
    assert list(shard_samples(missing, handler=ignore_and_continue, counts=counts)) == []
    assert counts.shards == 2


def test_end_of_data_without_end_blocks_is_an_error_unless_accepted():
    data = make_tar([("a.txt", b"A")])
    with pytest.raises(TarFormatError, match="truncated tar archive.*after member 'a.txt'") as info:
        members_of(data[:1024])
    assert (info.value.url, info.value.member) == ("mem.tar", "a.txt")
    with pytest.raises(TarFormatError, match="empty or truncated"):
        members_of(b"")
    assert list(tar_members(buffered(io.BytesIO(data[:1024]), "m"), "m", require_end_blocks=False)) == [
        ("a.txt", b"A")]
    assert list(tar_members(buffered(io.BytesIO(b""), "m"), "m", require_end_blocks=False)) == []


def rewrite_header(header: bytes, size_field: bytes | None = None, checksum_format: str = "%06o\0 ") -> bytes:
    """`header` with another size field encoding and its checksum recomputed in `checksum_format`."""
    block = bytearray(header)
    if size_field is not None:
        block[124:136] = size_field
    block[148:156] = b" " * 8
    block[148:156] = (checksum_format % sum(block)).encode().ljust(8, b"\0")
    return bytes(block)


def test_other_checksum_and_size_encodings():
    data = make_tar([("a.txt", b"hello")], fmt=tarfile.GNU_FORMAT)
    base256 = b"\x80" + (5).to_bytes(11, "big")
    for size_field, checksum_format in ((None, "%07o\0"), (base256, "%06o\0 "), (b"5" + b" " * 11, "%o\0")):
        changed = rewrite_header(data[:512], size_field, checksum_format) + data[512:]
        assert members_of(changed) == [("a.txt", b"hello")], (size_field, checksum_format)


def test_negative_base256_size_is_a_format_error():
    data = make_tar([("a.txt", b"hello")], fmt=tarfile.GNU_FORMAT)
    negative = b"\xff" * 11 + b"\xfb"  # -5 in GNU base-256
    changed = rewrite_header(data[:512], negative) + data[512:]
    with pytest.raises(TarFormatError, match="negative size field"):
        members_of(changed)


def test_members_across_window_edges_and_streams_without_readinto():
    members = [(f"s{i:03d}.{ext}", bytes([i]) * (i * 37 % 1500)) for i in range(60) for ext in ("a", "b")]
    data = make_tar(members, fmt=tarfile.USTAR_FORMAT)
    for window in (512, 1000, 2048, 7000):
        assert members_of(data, bufsize=512, window=window) == members, window

    class ReadOnly:  # an object with read() only: the window falls back to read + copy
        def __init__(self, blob):
            self.blob = io.BytesIO(blob)

        def read(self, count=-1):
            return self.blob.read(count)

    assert list(tar_members(ReadOnly(data), "r.tar", 4096)) == members
    with pytest.raises(ValueError, match="100"):
        list(tar_members(io.BytesIO(data), "r.tar", 100))


def ustar_header(name: bytes, size: int, kind: bytes = b"0", prefix: bytes = b"") -> bytes:
    """A ustar header block with raw `name` and `prefix` bytes (any bytes, unlike tarfile's)."""
    block = bytearray(512)
    block[:len(name)] = name
    block[124:136] = b"%011o\0" % size
    block[156:157] = kind
    block[257:265] = b"ustar\x0000"
    block[345:345 + len(prefix)] = prefix
    return rewrite_header(bytes(block))


def raw_tar(entries) -> bytes:
    """A tar of (name, data, prefix) entries with hand-made ustar headers, then the end blocks."""
    out = b""
    for name, data, prefix in entries:
        out += ustar_header(name, len(data), prefix=prefix) + data + b"\0" * (-len(data) % 512)
    return out + b"\0" * 1024


ODD_NAMES = [b"__a__", b"____", b"___", b"__a__/x.txt", b"__a__\n", b"__a__x/y.txt", b"_a__.txt",
             b"a/__b__", b"k.TXT", b"k.\xc3\x84X", b"bad\xff.Jpg", b"d/.hidden", b"noext", b"a.b/c",
             b"x.y.Z"]


def test_odd_names_match_the_python_rules():
    entries = [(name, b"%d" % i, b"") for i, name in enumerate(ODD_NAMES)]
    entries += [(b"n.JPG", b"p", b"__m__"), (b"n.txt", b"q", b"dir/__m__"), (b"z.Txt", b"r", b"pre/fix")]
    got = members_of(raw_tar(entries))
    names = [(p + b"/" if p else b"") + n for n, _, p in entries]
    meta = re.compile(r"__[^/]*__($|/)")
    expected = [(n.decode("utf-8", "surrogateescape"), d) for n, (_, d, _) in zip(names, entries)]
    assert got == [(n, d) for n, d in expected if not meta.match(n)]
    samples = list(shard_samples_of(raw_tar(entries)))
    assert samples == list(group_samples(iter(got), "mem.tar"))
    assert {"__key__": "k", "__url__": "mem.tar", "txt": b"8", "äx": b"9"} in samples
    assert {"__key__": "bad\udcff", "__url__": "mem.tar", "jpg": b"10"} in samples
    assert [s["__key__"] for s in samples][-3:] == ["x", "dir/__m__/n", "pre/fix/z"]  # __m__/n is metadata


def shard_samples_of(data: bytes):
    from tensorcom.shards._tarstream import _group, _read_members

    return _group(_read_members(buffered(io.BytesIO(data), "mem.tar"), "mem.tar", 4096), "mem.tar", None, None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=99).filter(lambda b: b[0] != 0 and b"\0" not in b),
                          st.binary(max_size=700), st.sampled_from([b"", b"pre", b"__m__", b"\xe2x"])),
                max_size=6),
       st.integers(0, 3000), st.integers(0, 3000), st.integers(0, 255))
def test_c_and_python_scanners_agree(entries, end, where, value):
    """Same members, stop offset and last name, also with one byte of the archive overwritten."""
    if tarscan.scan_c is None:
        pytest.skip("tensorcom.shards._ctarscan is not built")
    buf = bytearray(raw_tar(entries))
    end = min(end, len(buf))
    if where < len(buf):
        buf[where] = value

    def run(scan):
        items = []
        state = yield_all(scan(buf, 0, end), items)
        return items, state

    assert run(tarscan.scan_c) == run(tarscan.scan_python)


def yield_all(iterator, items):
    """Collect `iterator`'s items into `items` and return its return value (StopIteration.value)."""
    while True:
        try:
            items.append(next(iterator))
        except StopIteration as stop:
            return stop.value


def make_pax_tar(members, fmt: int, mtime: float) -> bytes:
    """`members` (name, bytes) in format `fmt` with a float mtime (a pax header per member in pax
    format, as WebDataset writes), then a pax global header's worth of records when `fmt` is pax."""
    out = io.BytesIO()
    globals_ = {"comment": "written by a test"} if fmt == tarfile.PAX_FORMAT else None
    with tarfile.open(fileobj=out, mode="w", format=fmt, pax_headers=globals_) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), mtime
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.text("abé_-./", min_size=1, max_size=160).filter(
    lambda s: not s.startswith("/") and not s.endswith("/") and "//" not in s), st.binary(max_size=1500)),
    min_size=1, max_size=6),
       st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]), st.sampled_from([0, 1.5]),
       st.integers(0, 9000), st.integers(0, 9000), st.integers(0, 255))
def test_c_and_python_scanners_agree_on_pax_and_gnu_headers(members, fmt, mtime, end, where, value):
    """Pax (per-member and global) and GNU long-name headers: the scanners take the same members as
    tarfile reads whole, and agree with each other on any prefix with one byte overwritten."""
    buf = bytearray(make_pax_tar(members, fmt, mtime))
    expected = [m for m in tarfile_members(bytes(buf)) if not re.match(r"__[^/]*__($|/)", m[0])]
    items: list = []
    yield_all(tarscan.scanner()(buf, 0, len(buf)), items)
    assert [(name, data) for name, _, _, data in items] == expected
    if tarscan.scan_c is None:
        return
    end = min(end, len(buf))
    if where < len(buf):
        buf[where] = value

    def run(scan):
        taken: list = []
        state = yield_all(scan(buf, 0, end), taken)
        return taken, state

    assert run(tarscan.scan_c) == run(tarscan.scan_python)


def test_signed_checksum_and_scan_arguments():
    data = make_tar([("é.txt", b"x")], fmt=tarfile.USTAR_FORMAT)
    block = bytearray(data[:512])
    block[148:156] = b" " * 8
    signed = sum(b - 256 if b > 127 else b for b in block)
    block[148:156] = b"%06o\0 " % signed  # as some old tars wrote it: only the careful path accepts it
    assert members_of(bytes(block) + data[512:]) == [("é.txt", b"x")]
    if tarscan.scan_c is not None:
        for pos, end in ((-1, 10), (5, 4), (0, len(data) + 1)):
            with pytest.raises(ValueError, match="pos"):
                tarscan.scan_c(data, pos, end)


def test_pure_python_switch(monkeypatch):
    monkeypatch.setenv("TENSORCOM_PURE_PYTHON", "yes")
    assert tarscan.scanner() is tarscan.scan_python
    monkeypatch.setenv("TENSORCOM_PURE_PYTHON", "0")
    assert tarscan.scanner() is (tarscan.scan_c or tarscan.scan_python)


@pytest.mark.parametrize("record", [b"0 x=y\n", b"00path", b"9 path=a\n1 "])
def test_malformed_pax_record_is_an_error_not_a_hang(record):
    pax = ustar_header(b"PaxHeader/a.txt", len(record), kind=b"x") + record + b"\0" * (-len(record) % 512)
    data = pax + raw_tar([(b"a.txt", b"A", b"")])
    with pytest.raises(TarFormatError, match="malformed pax record") as info:
        members_of(data)
    assert info.value.url == "mem.tar" and info.value.member == "PaxHeader/a.txt"


@pytest.mark.parametrize("record", [b"14 size=abcde\n", b"11 size=-5\n"])
def test_bad_pax_size_is_a_tar_format_error(record, tmp_path):
    pax = ustar_header(b"PaxHeader/a.txt", len(record), kind=b"x") + record + b"\0" * (-len(record) % 512)
    (tmp_path / "pax.tar").write_bytes(pax + raw_tar([(b"a.txt", b"A", b"")]))
    url = str(tmp_path / "pax.tar")
    with pytest.raises(TarFormatError, match="bad size") as info:
        list(shard_samples(url))
    assert info.value.url == url and info.value.member == "a.txt"
    counts = SkipCounts()
    assert list(shard_samples(url, handler=ignore_and_continue, counts=counts)) == []
    assert counts.shards == 1
