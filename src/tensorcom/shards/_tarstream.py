"""Tar shards → members → samples, as three small chained generators, with our own header parser.

    open_shard(url)              a buffered binary stream (1 MiB reads), transparently gunzipped
    tar_members(stream, url)     (name, bytes) for each regular file; pax / GNU long names resolved,
                                 `__meta__` members skipped; headers checked (checksum, sizes, truncation)
    group_samples(members, url)  dicts {"__key__", "__url__", ext: bytes}: consecutive members with one key
    shard_samples(url)           all three, with the bad-data policy applied per shard and per sample
    split_name(name)             (key, extension) of a member name, or None

No tarfile objects and no read call per member: the stream is read into a 2 MiB window (readinto), a
scanner (tensorcom.shards._tarscan: C when built, else Python) walks every ordinary header lying wholly in it
and hands out (name, key, extension, data), one copy of each member's data; the careful one-member
parser here takes what the scanner leaves (pax / GNU headers, members crossing the window's edge or
larger than it, bad data, the end). Errors are TarFormatError / OpenError / SampleError naming the
shard URL and the member.
"""

from __future__ import annotations

import io
import zlib
from typing import IO, Any, Iterable, Iterator

from tensorcom.errors import OpenError, SampleError, ShardError, TarFormatError
from tensorcom.shards._tarscan import BLOCK, META, REGULAR, Keyed, Window, header_name, keyed, read_into, scanner
from tensorcom.shards._tarscan import split_name as split_name  # public here, as before
from tensorcom.shards._schemes import DEFAULT_BUFSIZE
from tensorcom.shards.gopen import gopen
from tensorcom.shards.handlers import Handler, SkipCounts, handle

WINDOW = 2 * DEFAULT_BUFSIZE  # bytes per readinto; above the stream's buffer size, so reads skip that buffer


class Gunzip(io.RawIOBase):
    """Raw stream of the decompressed bytes of a gzip stream (several gzip members allowed).

    Corrupt or truncated gzip data raises TarFormatError naming `url`.
    """

    def __init__(self, source: IO[bytes], url: str, bufsize: int = DEFAULT_BUFSIZE):
        super().__init__()
        self.source, self.url, self.bufsize = source, url, bufsize
        self.inflater = zlib.decompressobj(wbits=31)
        self.pending = b""

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.source.close()
        super().close()

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            data = self._next_input()
            if data is None:
                return 0
            self._inflate(data, len(buffer))
        count = min(len(buffer), len(self.pending))
        buffer[:count] = self.pending[:count]
        self.pending = self.pending[count:]
        return count

    def _next_input(self) -> bytes | None:
        """Compressed bytes to feed next: what the inflater left (its output limit, or the start of the
        next gzip member), else a read from the source; None at a clean end of the stream."""
        inflater = self.inflater
        if inflater.unconsumed_tail:
            return inflater.unconsumed_tail
        if inflater.eof and inflater.unused_data.strip(b"\0"):
            return inflater.unused_data
        data = self.source.read(self.bufsize)
        if not data and not inflater.eof:
            raise TarFormatError("truncated gzip stream", url=self.url)
        return data or None

    def _inflate(self, data: bytes, limit: int) -> None:
        if self.inflater.eof:  # a new gzip member follows the last one (or trailing zero padding)
            if not data.strip(b"\0"):
                return
            self.inflater = zlib.decompressobj(wbits=31)
        try:
            self.pending = self.inflater.decompress(data, max(limit, self.bufsize))
        except zlib.error as exn:
            raise TarFormatError(f"corrupt gzip data: {exn}", url=self.url) from exn


class _RawAdapter(io.RawIOBase):
    """A raw stream over any object with read(n) (its readinto used where it has one, no copy), so
    io.BufferedReader can buffer it."""

    def __init__(self, source: IO[bytes]):
        super().__init__()
        self.source = source

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return read_into(self.source, buffer)

    def close(self) -> None:
        self.source.close()
        super().close()


def buffered(stream: IO[bytes], url: str, bufsize: int = DEFAULT_BUFSIZE) -> io.BufferedReader:
    """`stream` as an io.BufferedReader with large reads, gunzipped when it starts with gzip magic."""
    if not isinstance(stream, io.BufferedReader):
        stream = io.BufferedReader(_RawAdapter(stream), bufsize)
    try:
        magic = stream.peek(2)[:2]
    except ShardError:
        raise
    except Exception as exn:
        raise OpenError(f"read failed: {exn}", url=url) from exn
    if magic == b"\x1f\x8b":
        stream = io.BufferedReader(Gunzip(stream, url, bufsize), bufsize)
    return stream


def open_shard(url: str, bufsize: int = DEFAULT_BUFSIZE, **open_options: Any) -> io.BufferedReader:
    """Open a shard URL (any gopen scheme) for member parsing; see `buffered`."""
    return buffered(gopen(url, "rb", bufsize=bufsize, **open_options), url, bufsize)


def _octal(field: bytes, url: str, what: str, member: str | None) -> int:
    if field[0] & 0x80:  # GNU base-256: two's complement over the field, 0x80 marking a positive value
        value = int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
        if field[0] & 0x40:  # 0xFF...: negative, no valid size or checksum
            raise TarFormatError(f"negative {what} field {field!r} in tar header", url=url, member=member)
        return value
    try:
        return int(field.split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        raise TarFormatError(f"bad {what} field {field!r} in tar header", url=url, member=member) from None


def _check_header(header: bytes, url: str, previous: str | None) -> None:
    """Raise TarFormatError unless the stored checksum is the header's unsigned (or, as some old tars
    wrote it, signed) byte sum with the checksum field counted as spaces."""
    stored = _octal(header[148:156], url, "checksum", previous)
    unsigned = sum(header) - sum(header[148:156]) + 8 * 32
    if stored != unsigned:
        signed = sum(b - 256 if b > 127 else b for b in header) - sum(header[148:156]) + 256
        if stored != signed:
            where = f"header after {previous!r}" if previous else "first header"
            raise TarFormatError(f"bad tar header checksum ({where})", url=url, member=previous)


def _pax_records(data: bytes, url: str, member: str | None) -> dict[str, str]:
    records, pos = {}, 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            length = 0
        if space < 0 or length <= space - pos:  # no length, or one too short to get past its digits
            raise TarFormatError(f"malformed pax record at byte {pos}", url=url, member=member)
        key, _, value = data[space + 1: pos + length - 1].partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def tar_members(stream: IO[bytes], url: str, window: int = WINDOW,
                require_end_blocks: bool = True) -> Iterator[tuple[str, bytes]]:
    """Yield (member name, contents) for every regular file of the tar `stream`, in archive order.

    Reads `window` bytes at a time (readinto, so large reads bypass the stream's own buffer). Skips
    directories, links, special files and `__meta__` members. Raises TarFormatError for a bad
    checksum, a truncated header or member, and an archive that ends without its two end-of-archive
    blocks (an empty stream included) unless `require_end_blocks` is False (then the end of the data
    on a header boundary also ends the archive); OpenError when reading the stream fails.
    """
    for name, _, _, data in _read_members(stream, url, window, require_end_blocks):
        yield name, data


def _special(kind: int, data: bytes, override: dict[str, str] | None, url: str,
             name: str) -> dict[str, str] | None:
    """The name/size overrides for the next member after a non-regular member of type `kind`."""
    if kind == 76:  # 'L': GNU long name of the next member
        return dict(override or {}, path=data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape"))
    if kind == 120:  # 'x': pax extended header for the next member
        return dict(override or {}, **_pax_records(data, url, name))
    if kind in (75, 103):  # 'K' (GNU long link name) and 'g' (pax global header) change nothing
        return override
    return None


def _read_members(stream: IO[bytes], url: str, size: int, require_end_blocks: bool = True) -> Iterator[Keyed]:
    """tar_members as (name, key, extension, data). The scanner takes every member lying wholly in
    the window (with its pax / GNU headers); what it leaves (a member crossing the window's edge or
    larger than half the window, bad data, the end) goes through `_one_member`. The window is
    refilled only when at most half of it is unparsed, so moving that rest to the front never costs
    more than the bytes newly read. Read failures become OpenError."""
    window, scan = Window(stream, size), scanner()
    previous: str | None = None
    override: dict[str, str] | None = None  # from pax / GNU long-name headers, for the next member
    try:
        while True:
            if override is None:
                pos, last = yield from scan(window.buf, window.pos, window.end)
                if last is not None:
                    window.pos, previous = pos, last
            if 2 * (window.end - window.pos) <= len(window.buf) and window.fill():
                continue
            member = _one_member(window, url, previous, override, require_end_blocks)
            if member is None:
                return
            previous, kind, data = member
            if kind in REGULAR:
                override = None
                if previous[:2] != "__" or not META.match(previous):
                    yield keyed(previous, data)
            else:
                override = _special(kind, data, override, url, previous)
    except ShardError:
        raise
    except (OSError, EOFError) as exn:
        raise OpenError(f"read failed: {exn}", url=url) from exn


def _one_member(window: Window, url: str, previous: str | None, override: dict[str, str] | None,
                require_end_blocks: bool = True) -> tuple[str, int, bytes] | None:
    """(name, type flag, data) of the member at the window's position, every check made; None at the
    end of the archive (two end-of-archive blocks; or, unless `require_end_blocks`, the end of the
    data on a header boundary)."""
    header = window.take(BLOCK)
    if len(header) < BLOCK:
        if header:
            raise TarFormatError("truncated tar header", url=url, member=previous)
        if require_end_blocks and previous is None:
            raise TarFormatError("empty or truncated tar archive: no member and no end-of-archive blocks", url=url)
        if require_end_blocks:
            raise _missing_end(url, previous, "ends")
        return None
    if not header[0] and not header.strip(b"\0"):
        if require_end_blocks and len(window.take(BLOCK)) < BLOCK:
            raise _missing_end(url, previous, "has one end-of-archive block of two")
        return None
    _check_header(header, url, previous)
    size = _octal(header[124:136], url, "size", previous)
    name = header_name(header)
    if override:
        name = override.get("path", name)
        size = _pax_size(override, size, url, name)
    data = window.take(size)
    if len(data) != size:
        raise TarFormatError(f"truncated member: {len(data)} of {size} bytes", url=url, member=name)
    pad = -size % BLOCK
    if pad and len(window.take(pad)) < pad:
        raise TarFormatError("truncated member padding", url=url, member=name)
    return name, header[156], data


def _missing_end(url: str, previous: str | None, how: str) -> TarFormatError:
    """The TarFormatError of an archive that `how` ("ends", ...) after member `previous` without its
    end-of-archive blocks."""
    where = f"after member {previous!r}" if previous else "before any member"
    return TarFormatError(f"truncated tar archive: it {how} {where} without its end-of-archive blocks "
                         "(pass require_end_blocks=False to accept such archives)", url=url, member=previous)


def _pax_size(override: dict[str, str], size: int, url: str, name: str) -> int:
    """The member size a pax header sets (else `size`); TarFormatError when it is not a whole number."""
    text = override.get("size")
    if text is None:
        return size
    try:
        size = int(text)
    except ValueError:
        size = -1
    if size < 0:
        raise TarFormatError(f"bad size {text!r} in pax header", url=url, member=name)
    return size


def group_samples(members: Iterator[tuple[str, bytes]], url: str, handler: Handler | None = None,
                  counts: SkipCounts | None = None) -> Iterator[dict[str, Any]]:
    """Group consecutive members with the same key into samples {"__key__", "__url__", ext: bytes}.

    A repeated extension within a sample is a SampleError; under a continuing `handler` the whole
    sample is dropped and counted. Names without an extension are ignored.
    """
    return _group((keyed(name, data) for name, data in members), url, handler, counts)


def _group(members: Iterable[Keyed], url: str, handler: Handler | None,
           counts: SkipCounts | None) -> Iterator[dict[str, Any]]:
    """group_samples over (name, key, extension, data) members (the scanners' form)."""
    current: dict[str, Any] = {}
    key_now = ""  # the key of the sample in `current`; "" before the first (keys are never empty)
    bad = False
    for name, key, ext, data in members:
        if key != key_now:
            if key is None:
                continue
            if key_now and not bad:
                yield current
            current, key_now, bad = {"__key__": key, "__url__": url, ext: data}, key, False
        elif ext in current:
            if not bad:
                error = SampleError(f"extension {ext!r} repeated in sample {key!r}", url=url, member=name)
                handle(error, handler, counts, "samples")
                bad = True
        else:
            current[ext] = data
    if key_now and not bad:
        yield current


def shard_samples(url: str, handler: Handler | None = None, counts: SkipCounts | None = None,
                  bufsize: int = DEFAULT_BUFSIZE, require_end_blocks: bool = True,
                  **open_options: Any) -> Iterator[dict[str, Any]]:
    """Samples of one shard: open → members → samples. A shard that cannot be opened, is malformed or
    is truncated (see tar_members for `require_end_blocks`) raises (default) or, under a continuing
    `handler`, ends the shard there and counts it as skipped (samples already yielded stay yielded;
    the incomplete sample at the error is dropped)."""
    try:
        stream = open_shard(url, bufsize=bufsize, **open_options)
    except ShardError as exn:
        handle(exn, handler, counts, "shards")
        return
    try:
        members = _read_members(stream, url, max(WINDOW, 2 * bufsize), require_end_blocks)
        yield from _group(members, url, handler, counts)
    except (TarFormatError, OpenError) as exn:
        handle(exn, handler, counts, "shards")
    finally:
        try:
            stream.close()
        except ShardError as exn:
            handle(exn, handler, counts, "shards")
