"""The bytes of a tar archive as TarWriter writes it: member headers and members packed into large writes.

    headers = Headers(mtime=0, user="bigdata", group="bigdata", mode=0o444)
    headers("cat/001.jpg", size) -> bytes        the header block(s) of one regular member
    pack = TarPack(sink, headers)                 sink: anything with write(bytes) (a Destination, a GzipFile)
    pack.add("cat/001.jpg", data)                 header, data and padding to a whole block
    pack.size                                     bytes so far, headers and padding included
    pack.finish()                                 two zero blocks, padding to a whole tar record, the last write
    pack.drop()                                   forget what is not yet written (an abandoned archive)

Headers are POSIX (pax) ustar headers with one set of attributes (mtime, owner, group, mode; uid and
gid 0), what tarfile writes for them. Where the attributes fit a single ustar block, a header is joined
from the fixed pieces of one prepared block and the name, size and checksum; a name that ustar cannot
hold (over 100 bytes, not ASCII), a size of 8 GiB or more, or attributes that need pax records get
tarfile's own header. The end of an archive is tarfile's too: two zero blocks, then zeros to a multiple
of its 10240-byte record. Members are collected in memory and handed to the sink in writes of about
`chunk` bytes; a write happens right after the member that filled the chunk, so a failing sink fails
while that member is added.
"""

from __future__ import annotations

import tarfile
from typing import Any

BLOCK = tarfile.BLOCKSIZE
RECORD = tarfile.RECORDSIZE
CHUNK = 1 << 16
_MAX_SIZE = 8 ** 11  # sizes at or above this need a pax header
_ZEROS = bytes(BLOCK)


class Headers:
    """Header blocks of regular members whose attributes are `mtime`, `user`, `group` and `mode`."""

    def __init__(self, mtime: int = 0, user: str = "bigdata", group: str = "bigdata", mode: int = 0o444):
        self.template = dict(mtime=int(mtime), uname=user, gname=group, mode=mode, uid=0, gid=0)
        block = self._tarfile_header("", 0)
        self.fast = len(block) == BLOCK  # the attributes fit one ustar block: headers are joined from pieces
        # the fixed pieces around the name (0:100), the size (124:136) and the checksum (148:156), and their
        # checksum with the checksum field counted as spaces
        self.middle, self.after_size, self.tail = block[100:124], block[136:148], block[156:]
        self.fixed_sum = sum(self.middle) + sum(self.after_size) + sum(self.tail) + 8 * ord(" ")

    def _tarfile_header(self, name: str, size: int) -> bytes:
        info = tarfile.TarInfo(name)
        for attribute, value in self.template.items():
            setattr(info, attribute, value)
        info.size = size
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")

    def __call__(self, name: str, size: int) -> bytes:
        """The header block(s) of a regular member `name` of `size` bytes."""
        if not self.fast or len(name) > 100 or not name.isascii() or not 0 <= size < _MAX_SIZE:
            return self._tarfile_header(name, size)
        encoded = name.encode("ascii")
        size_field = b"%011o\0" % size
        checksum = self.fixed_sum + sum(encoded) + sum(size_field)
        return b"".join((encoded, _ZEROS[len(encoded):100], self.middle, size_field, self.after_size,
                         b"%06o\0 " % checksum, self.tail))


class TarPack:
    """The members of one archive, written to `sink` in writes of about `chunk` bytes. `size`: bytes
    added so far (written or pending), headers and padding included."""

    def __init__(self, sink: Any, headers: Headers, chunk: int = CHUNK):
        self.sink, self.headers, self.chunk = sink, headers, chunk
        self.buffer: list[bytes] = []
        self.pending = 0
        self.size = 0

    def add(self, name: str, data: bytes) -> None:
        """Append member `name` holding `data`; the sink is written when a chunk is full (its errors raise)."""
        header = self.headers(name, len(data))
        pad = -len(data) % BLOCK
        self.buffer += (header, data, _ZEROS[:pad]) if pad else (header, data)
        added = len(header) + len(data) + pad
        self.pending += added
        self.size += added
        if self.pending >= self.chunk:
            self._flush()

    def _flush(self) -> None:
        data = b"".join(self.buffer)
        self.buffer, self.pending = [], 0
        self.sink.write(data)

    def finish(self) -> None:
        """End the archive (two zero blocks, padding to a whole tar record) and write what is pending."""
        end = bytes(2 * BLOCK + (-(self.size + 2 * BLOCK) % RECORD))
        self.buffer.append(end)
        self.size += len(end)
        self._flush()

    def drop(self) -> None:
        """Forget the members not yet written."""
        self.buffer, self.pending = [], 0
