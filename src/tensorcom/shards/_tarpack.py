"""Packing samples of bytes into a tar archive in large writes: the converter's (tensorcom.shards.convert)
fast path, byte-identical to what TarWriter writes for the same samples (a test pins it).

    pack = TarPack(destination)        # a tensorcom.shards._destinations.Destination
    pack.add("cat/001", [("cls", b"0"), ("jpg", data)])     # the members KEY.FIELD, in the order given
    pack.close()                       # end blocks, record padding, commit (the atomic rename)
    pack.abort()                       # discard: nothing appears under the final name
    write_tar_shard(path, samples)     # the same over sample dicts (shard_fields: as TarWriter encodes them)
    tar_samples(path)                  # how many samples a finished shard holds, from its headers

Headers are ustar headers with TarWriter's fixed attributes (mtime 0, mode 0o444, owner bigdata),
joined from the fixed pieces of one prepared block and the name, size and checksum; a name that ustar cannot hold
(over 100 bytes, not ASCII) gets tarfile's own PAX header, as TarWriter's would. Output is collected
in memory and handed to the destination in writes of about `chunk` bytes.
"""

from __future__ import annotations

import os
import tarfile
from typing import Any, Iterable

from tensorcom.shards._destinations import Destination, open_destination
from tensorcom.shards.fields import encode_field

BLOCK = tarfile.BLOCKSIZE
RECORD = tarfile.RECORDSIZE
TEMPLATE = dict(mtime=0, uname="bigdata", gname="bigdata", mode=0o444, uid=0, gid=0)
_MAX_SIZE = 8 ** 11  # sizes at or above this need a PAX header


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    for attribute, value in TEMPLATE.items():
        setattr(info, attribute, value)
    info.size = size
    return info


def _parts() -> tuple[bytes, bytes, bytes, int]:
    """The fixed pieces of a header around its name (0:100), size (124:136) and checksum (148:156),
    and the checksum of the fixed pieces (the checksum field counted as spaces)."""
    block = _tarinfo("", 0).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    middle, tail = block[100:124], block[156:]
    return middle, block[136:148], tail, sum(middle) + sum(block[136:148]) + sum(tail) + 8 * ord(" ")


_MIDDLE, _AFTER_SIZE, _TAIL, _FIXED_SUM = _parts()
_NULS = bytes(100)


def member_header(name: str, size: int) -> bytes:
    """The header block(s) of a regular member `name` of `size` bytes, as TarWriter writes them."""
    if len(name) > 100 or not name.isascii() or not 0 <= size < _MAX_SIZE:
        return _tarinfo(name, size).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    encoded = name.encode("ascii")
    size_field = b"%011o\0" % size
    checksum = _FIXED_SUM + sum(encoded) + sum(size_field)
    return b"".join((encoded, _NULS[len(encoded):], _MIDDLE, size_field, _AFTER_SIZE, b"%06o\0 " % checksum, _TAIL))


class TarPack:
    """One archive being written to `dest` (a Destination: completed by close(), dropped by abort()).
    `count` samples and `size` bytes so far (headers and padding included)."""

    def __init__(self, dest: Destination, chunk: int = 1 << 20):
        self.dest, self.chunk = dest, chunk
        self.buffer: list[bytes] = []
        self.pending = 0
        self.size = 0
        self.count = 0

    def add(self, key: str, fields: Iterable[tuple[str, bytes]]) -> None:
        """Append the members KEY.FIELD of one sample (fields already bytes)."""
        for name, data in fields:
            header = member_header(f"{key}.{name}", len(data))
            pad = -len(data) % BLOCK
            self.buffer += (header, data, b"\0" * pad) if pad else (header, data)
            self.pending += len(header) + len(data) + pad
        self.count += 1
        if self.pending >= self.chunk:
            self._flush()

    def _flush(self) -> None:
        data = b"".join(self.buffer)
        self.buffer, self.pending = [], 0
        self.dest.write(data)
        self.size += len(data)

    def close(self) -> None:
        """End the archive (two zero blocks, padding to a whole tar record) and commit the destination."""
        end = self.size + self.pending + 2 * BLOCK
        self.buffer.append(b"\0" * (2 * BLOCK + (-end % RECORD)))
        self._flush()
        self.dest.commit()

    def abort(self) -> None:
        """Drop the archive: nothing is left under its name (for a local path)."""
        self.buffer = []
        self.dest.discard()


def shard_fields(sample: dict[str, Any]) -> tuple[str, list[tuple[str, bytes]]]:
    """(key, [(field, bytes)] sorted) of one sample, encoded as TarWriter encodes; ValueError for a bad key."""
    key = sample.get("__key__")
    if not isinstance(key, str) or not key or "." in key[key.rfind("/") + 1:]:
        raise ValueError(f"a sample needs a str '__key__' without a dot in its last component, got {key!r}")
    fields = []
    for name in sorted(sample):
        if not name.startswith("_"):
            value = sample[name]
            fields.append((name, value if type(value) is bytes else encode_field(name, value)))
    return key, fields


def write_tar_shard(path: str, samples: Iterable[dict[str, Any]]) -> int:
    """Write `samples` as one tar shard at `path` (atomically); returns how many."""
    pack = TarPack(open_destination(path))
    try:
        for sample in samples:
            pack.add(*shard_fields(sample))
        pack.close()
    except BaseException:
        pack.abort()
        raise
    return pack.count


def tar_samples(path: str) -> int | None:
    """Samples (runs of members with one key) of the tar file at `path`, from its headers only (the data
    is skipped); None when the file ends before its last member's data and the end-of-archive blocks."""
    keys, last = 0, None
    with tarfile.open(path, "r:") as archive:
        for member in archive:
            directory, _, name = member.name.rpartition("/")
            key = (directory, name.split(".", 1)[0])
            keys, last = keys + (key != last), key
        end = archive.offset
    return keys if os.path.getsize(path) >= end + 2 * tarfile.BLOCKSIZE else None
