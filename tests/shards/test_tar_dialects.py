"""The tar reader against the archives other writers make: one set of samples, many tar dialects.

The same samples (keys with and without directories, names over 100 bytes, non-ASCII UTF-8 names,
upper-case extensions, 0-byte, 512-byte and > 1 MiB members) are written by Python's tarfile in every
format (and gzip'ed, and with a pax global header), by GNU tar and bsdtar in each of their formats (one
GNU tar variant with directory entries), by WebDataset 1.0.2's TarWriter (a pax header with a float
mtime before every member) and by our TarWriter. Each archive is then read by `shards.samples` with the
C scanner and with the pure-Python one and compared with the source samples and with what WebDataset
reads from the same file; `tar_members` with small read windows checks members crossing window edges.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from tensorcom import shards
from tensorcom.shards._tarstream import open_shard, tar_members

Sample = dict[str, Any]  # {"__key__": str, extension: bytes}, extensions as written (any case)


def make_samples() -> list[Sample]:
    """The source samples: every name and size case the dialects must agree on."""
    rng = random.Random(20240607)
    sizes = iter([512, 0, 1, 511, 513, 1024, 1536, 3000, 20000, 700, 9, 100, 2048, 5, 777, 4095, 4097])
    keys = ["s0000", "dir/sub/s0001", "v1.2/k0002", "long/" + "d" * 90 + "/" + "n" * 60 + "0003",
            "k" * 120 + "0004", "ünïcödé/ключ-0005", "日本語/" + "é" * 60 + "0006"]
    result = [{"__key__": key, "jpg": rng.randbytes(next(sizes)), "cls": b"%d" % (index % 3),
               "json": json.dumps({"index": index, "key": key}).encode(), "txt": rng.randbytes(next(sizes))}
              for index, key in enumerate(keys)]
    result.append({"__key__": "s0007", "JPG": rng.randbytes(1_300_007), "Txt": b"", "cls": b"7"})
    result.append({"__key__": "deep/s0008", "json": b"{}"})
    return result


def member_list(samples: list[Sample]) -> list[tuple[str, bytes]]:
    """(name, data) of every member in archive order: samples in order, fields sorted, as writers do."""
    return [(f"{s['__key__']}.{ext}", s[ext]) for s in samples for ext in sorted(s) if ext != "__key__"]


def read_form(sample: Sample) -> Sample:
    """A sample as readers give it: extensions lower-cased, `__url__` and other metadata dropped."""
    return {k.lower(): v for k, v in sample.items() if k == "__key__" or not k.startswith("__")}


def fits_ustar(name: str) -> bool:
    """Whether ustar holds `name`: at most 100 bytes, or split at a slash into a prefix of at most
    155 bytes and a name of at most 100 (tarfile and GNU tar split the same way)."""
    raw = name.encode()
    if len(raw) <= 100:
        return True
    return any(raw[i] == ord("/") and i <= 155 and 0 < len(raw) - i - 1 <= 100 for i in range(len(raw)))


def any_name(name: str) -> bool:
    """Formats with long-name records (GNU 'L', pax 'x') hold every name."""
    return True


# ---- writers: each takes (samples, archive path, directory holding the members as files) ----

def write_tarfile(samples: list[Sample], path: Path, fmt: int, mode: str = "w", mtime: float = 0,
                  pax_headers: dict[str, str] | None = None) -> None:
    """Python's tarfile in format `fmt` ("w:gz" mode gzips); `pax_headers` add a global header."""
    with tarfile.open(path, mode, format=fmt, pax_headers=pax_headers) as tar:
        for name, data in member_list(samples):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), mtime
            tar.addfile(info, io.BytesIO(data))


def run_tar(command: list[str], samples: list[Sample], path: Path, tree: Path,
            directories: bool = False) -> None:
    """Run a tar `command` (options up to the file list) in `tree` on the members in archive order,
    each directory listed before its first file when `directories`."""
    names: list[str] = []
    for name, _ in member_list(samples):
        parts = name.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/".join(parts[:depth])
            if directories and folder not in names:
                names.append(folder)
        names.append(name)
    listing = path.with_suffix(".list")
    listing.write_bytes(b"".join(n.encode() + b"\0" for n in names))
    env = dict(os.environ, LC_ALL="C.UTF-8")
    subprocess.run([*command, "-f", str(path), "--null", "-T", str(listing)], cwd=tree, env=env,
                   check=True, capture_output=True)


def gnu_tar(fmt: str, directories: bool = False) -> Callable[..., None]:
    """A writer running GNU tar in `fmt` (gnu, oldgnu, posix, ustar) with --no-recursion."""
    def write(samples, path, tree):
        run_tar(["tar", "-c", f"--format={fmt}", "--no-recursion", "--owner=0", "--group=0",
                 "--mtime=@0"], samples, path, tree, directories)
    return write


def bsd_tar(fmt: str) -> Callable[..., None]:
    """A writer running bsdtar in `fmt` (pax, paxr, ustar, gnutar) with -n (no recursion)."""
    def write(samples, path, tree):
        run_tar(["bsdtar", "-c", "--format", fmt, "-n"], samples, path, tree)
    return write


def write_webdataset(samples: list[Sample], path: Path, tree: Path) -> None:
    """WebDataset 1.0.2's TarWriter with its defaults (pax format, float mtime: an 'x' header each)."""
    wds = pytest.importorskip("webdataset")
    with wds.TarWriter(str(path)) as writer:
        for sample in samples:
            writer.write(sample)


def write_ours(samples: list[Sample], path: Path, tree: Path) -> None:
    with shards.TarWriter(str(path)) as writer:
        for sample in samples:
            writer.write(sample)


@dataclass(frozen=True)
class Dialect:
    """One way of writing the samples: `write(samples, path, tree)`, the names the format `holds`,
    and the program it runs (the test is skipped when that is not on PATH)."""
    name: str
    write: Callable[[list[Sample], Path, Path], None]
    holds: Callable[[str], bool] = any_name
    suffix: str = ".tar"
    tool: str | None = None


DIALECTS = [
    Dialect("tarfile-ustar", lambda s, p, t: write_tarfile(s, p, tarfile.USTAR_FORMAT), fits_ustar),
    Dialect("tarfile-gnu", lambda s, p, t: write_tarfile(s, p, tarfile.GNU_FORMAT)),
    Dialect("tarfile-pax", lambda s, p, t: write_tarfile(s, p, tarfile.PAX_FORMAT)),
    Dialect("tarfile-pax-float-mtime", lambda s, p, t: write_tarfile(s, p, tarfile.PAX_FORMAT, mtime=time.time())),
    Dialect("tarfile-pax-global", lambda s, p, t: write_tarfile(
        s, p, tarfile.PAX_FORMAT, pax_headers={"comment": "global header ✓"})),
    Dialect("tarfile-pax-gz", lambda s, p, t: write_tarfile(s, p, tarfile.PAX_FORMAT, "w:gz", time.time()),
            suffix=".tar.gz"),
    Dialect("gnutar-gnu", gnu_tar("gnu"), tool="tar"),
    Dialect("gnutar-gnu-dirs", gnu_tar("gnu", directories=True), tool="tar"),
    Dialect("gnutar-oldgnu", gnu_tar("oldgnu"), tool="tar"),
    Dialect("gnutar-posix", gnu_tar("posix"), tool="tar"),
    Dialect("gnutar-ustar", gnu_tar("ustar"), fits_ustar, tool="tar"),
    Dialect("bsdtar-pax", bsd_tar("pax"), tool="bsdtar"),
    Dialect("bsdtar-paxr", bsd_tar("paxr"), tool="bsdtar"),
    Dialect("bsdtar-ustar", bsd_tar("ustar"), fits_ustar, tool="bsdtar"),
    Dialect("bsdtar-gnutar", bsd_tar("gnutar"), tool="bsdtar"),
    Dialect("webdataset", write_webdataset),
    Dialect("tensorcom", write_ours),
]


@pytest.fixture(scope="module")
def source() -> list[Sample]:
    return make_samples()


@pytest.fixture(scope="module")
def tree(source, tmp_path_factory) -> Path:
    """A directory holding every member of `source` as a file (what GNU tar and bsdtar archive)."""
    root = tmp_path_factory.mktemp("members")
    for name, data in member_list(source):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


@pytest.fixture(scope="module", params=DIALECTS, ids=lambda d: d.name)
def archive(request, source, tree, tmp_path_factory) -> tuple[str, list[Sample]]:
    """(path of the archive one dialect wrote, the source samples it holds), written once per module."""
    dialect: Dialect = request.param
    if dialect.tool and shutil.which(dialect.tool) is None:
        pytest.skip(f"{dialect.tool} is not installed (bsdtar: Debian's libarchive-tools)")
    held = [s for s in source if all(dialect.holds(name) for name, _ in member_list([s]))]
    path = tmp_path_factory.mktemp(dialect.name) / f"shard{dialect.suffix}"
    dialect.write(held, path, tree)
    return str(path), held


def test_the_samples_exercise_every_case(source):
    """The source holds what the dialects differ on; a change to make_samples must keep it so."""
    names = [name for name, _ in member_list(source)]
    sizes = {len(data) for _, data in member_list(source)}
    assert {0, 512}.issubset(sizes) and max(sizes) > 1 << 20
    assert any(len(n.encode()) > 100 and fits_ustar(n) for n in names)  # ustar prefix + name
    assert any(not fits_ustar(n) for n in names)  # needs GNU 'L' or a pax path
    assert any(not n.isascii() for n in names) and any(n != n.lower() for n in names)
    assert any("/" not in s["__key__"] for s in source) and any("/" in s["__key__"] for s in source)


def test_samples_match_the_source_and_webdataset(archive, tar_scanner):
    wds = pytest.importorskip("webdataset")
    url, held = archive
    ours = [read_form(s) for s in shards.samples(url, rank=0, world_size=1)]
    assert [s["__key__"] for s in ours] == [s["__key__"] for s in held]
    assert ours == [read_form(s) for s in held]
    theirs = [read_form(s) for s in wds.WebDataset(url, shardshuffle=False, empty_check=False)]
    assert ours == theirs


@pytest.mark.parametrize("window", [4096, 1536])
def test_members_across_small_windows(archive, tar_scanner, window):
    """tar_members with a window of a few blocks: members, pax and long-name headers cross its edges."""
    url, held = archive
    stream = open_shard(url)
    try:
        got = list(tar_members(stream, url, window=window))
    finally:
        stream.close()
    assert [name for name, _ in got] == [name for name, _ in member_list(held)]
    assert got == member_list(held)


def test_archive_ends_with_two_zero_blocks(archive):
    """Every writer ends its archive with the two end-of-archive blocks a strict reader requires."""
    url, held = archive
    data = Path(url).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert len([m for m in tar.getmembers() if m.isreg()]) == len(member_list(held))
        end = tar.offset  # where tarfile met the first zero block
    assert len(data) >= end + 1024 and not data[end:end + 1024].strip(b"\0")
