"""The fast path of the tar reader: a read window over a stream and a whole-buffer header scanner.

    Window(stream, size)     a bytearray of `size` bytes; buf[pos:end] is read but not yet parsed
    read_into(stream, view)  readinto where the stream has it, else read and copy (the window's reads,
                             and those of the tar reader's and the cache's raw streams)
    scan_python(buf, pos, end)   the pure-Python scanner: yields (name, key, extension, data)
                             and returns (pos, last)
    scanner()                the C scanner `tensorcom.shards._ctarscan.scan` (same contract) when it is built
                             and allowed (settings.tar_accelerator()), else scan_python

A scanner parses, from `pos`, every member that lies wholly in buf[pos:end] (header, data and
padding) with a plain header (a valid checksum, a plain octal size), together with the pax extended /
global and GNU long-name headers before it when their records are in the strict form ('path' and
'size' applied). It yields (name, key, extension, bytes) for the regular, non-`__meta__` members
among them (key and extension as `split_name` makes them, both None for a name without an
extension) and returns (as a generator's return value, which `yield from` hands back) the offset of
the first header of the first member it did not take (its pax / GNU headers included) and the name
of the last member it took (None when it took none). It never raises on bad data: it stops there,
and tarstream's careful one-member parser takes over (exact checksum, non-strict pax records,
base-256 sizes, members larger than the window, errors naming URL and member). Both scanners take
and stop at the same headers; tests/shards/test_tarstream.py checks it.
"""

from __future__ import annotations

import re
from typing import IO, Any, Callable, Iterator
from zlib import adler32

from tensorcom import settings

BLOCK = 512
META = re.compile(r"__[^/]*__($|/)")
REGULAR = (0, ord("0"), ord("7"))
SPECIAL = (ord("K"), ord("L"), ord("g"), ord("x"))  # GNU long link / long name, pax global / extended
POSIX_MAGIC = b"ustar\x0000"

Keyed = tuple[str, "str | None", "str | None", bytes]  # (name, key, extension, data)
Scanner = Callable[[Any, int, int], Iterator[Keyed]]  # returns (pos, last) at its end

try:
    from tensorcom.shards._ctarscan import scan as scan_c
except ImportError:  # built without a C compiler: the pure-Python scanner does the same work
    scan_c = None


def scanner() -> Scanner:
    """The scanner to use now: the C one when built and not disabled by $TENSORCOM_PURE_PYTHON."""
    return scan_c if scan_c is not None and settings.tar_accelerator() else scan_python


def read_into(stream: IO[bytes], view: Any) -> int:
    """Read from `stream` into `view` (a writable byte buffer: bytearray, memoryview of bytes): straight
    in where the stream has readinto, else read() and one copy. Returns the count of bytes read, 0 at
    the end of the stream."""
    readinto = getattr(stream, "readinto", None)
    if readinto is not None:
        return readinto(view) or 0
    data = stream.read(len(view))
    view[:len(data)] = data
    return len(data)


class Window:
    """A fixed bytearray read window over a binary stream (readinto preferred, read otherwise).

    `fill()` moves the unparsed tail buf[pos:end] to the front and reads as much as fits after it;
    `take(n)` returns the next n bytes as bytes (fewer only at the end of the stream), reading past
    the window directly from the stream when it holds fewer.
    """

    def __init__(self, stream: IO[bytes], size: int):
        if size < BLOCK:
            raise ValueError(f"window size {size} is smaller than a tar block ({BLOCK})")
        self.stream = stream
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)
        self.pos = self.end = 0

    def fill(self) -> int:
        """Move the unparsed tail to the front and read after it; returns the bytes read (0 at the end)."""
        rest = self.end - self.pos
        if self.pos and rest:
            self.buf[:rest] = bytes(self.view[self.pos:self.end])
        self.pos, self.end = 0, rest
        count = read_into(self.stream, self.view[rest:])
        self.end += count
        return count

    def take(self, count: int) -> bytes:
        """The next `count` bytes (fewer at the end of the stream), consumed."""
        start = self.pos
        if count <= self.end - start:
            self.pos = start + count
            return bytes(self.view[start:self.pos])
        head = bytes(self.view[start:self.end])
        self.pos = self.end
        return head + self.stream.read(count - len(head))


def header_name(header: bytes) -> str:
    """The member name of a header block: the name field, after the ustar prefix when there is one."""
    end = header.find(b"\0", 0, 100)
    raw = header[:end] if end >= 0 else header[:100]
    if header[345] and header[257:265] == POSIX_MAGIC:
        raw = header[345:500].split(b"\0", 1)[0] + b"/" + raw
    return raw.decode("utf-8", "surrogateescape")


def _plain_octal(field: bytes) -> int:
    """An octal number field in its plain form (blanks, octal digits, blanks, then NUL or the end of
    the field), as the C scanner reads it; -1 for anything else (base-256, signs, junk)."""
    text = field.split(b"\0", 1)[0].strip()
    if not text:
        return 0
    if not text.isdigit() or b"8" in text or b"9" in text:
        return -1
    return int(text, 8)


def _expected_adler(field: bytes) -> int:
    """The low half of adler32(header) that a header whose checksum field is `field` must have,
    or -1 when the field is not a plain octal number.

    adler32's low half is 1 + (byte sum mod 65521); with the checksum field counted as spaces the byte
    sum must equal the stored value. A corrupt header passes only if its byte sum moved by a multiple
    of 65521 (more than 256 changed bytes); the careful parser checks the exact sum.
    """
    stored = _plain_octal(field)
    return -1 if stored < 0 else (stored + (adler32(field) & 0xFFFF) - 256) % 65521


_known: dict[bytes, int] = {}  # checksum field -> expected adler32 low half; size field -> size


def split_name(name: str) -> tuple[str, str] | None:
    """(key, extension) of a member name: key up to the first dot of the basename, extension the rest
    lower-cased; None for names with no dot or an empty basename before it ("a/.hidden")."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot <= slash + 1:
        return None
    return name[:dot], name[dot + 1:].lower()


def keyed(name: str, data: bytes) -> Keyed:
    """(name, key, extension, data) for a member; key and extension None when `name` has none."""
    split = split_name(name)
    return (name, None, None, data) if split is None else (name, split[0], split[1], data)


def pax_overrides(data: Any) -> tuple[bytes | None, int | None] | None:
    """(path, size) set by the pax records `data` (each None when not set), or None when a record is
    not in the strict form "LENGTH KEY=VALUE\\n" or a size is not plain decimal digits; the careful
    parser then decides. A later record of a key wins over an earlier one, as in the careful parser."""
    data = bytes(data)
    path = size = None
    pos, end = 0, len(data)
    while pos < end and data[pos]:
        space = data.find(b" ", pos, pos + 20)
        digits = data[pos:space]
        if space < 0 or not digits.isdigit():
            return None
        stop = pos + int(digits)
        equal = data.find(b"=", space + 1, stop)
        if stop > end or equal < 0 or data[stop - 1] != 10:
            return None
        key = data[space + 1:equal]
        if key == b"path":
            path = data[equal + 1:stop - 1]
        elif key == b"size":
            text = data[equal + 1:stop - 1]
            if not text.isdigit() or len(text) > 18:
                return None
            size = int(text)
        pos = stop
    return path, size


def _special_overrides(kind: int, data: Any, path: bytes | None,
                       size: int | None) -> tuple[bytes | None, int | None] | None:
    """The (path, size) overrides after a special member of type `kind` whose contents are `data`;
    None when its records are not in the strict form (the careful parser then takes it)."""
    if kind == 76:  # 'L': GNU long name of the next member
        return bytes(data).split(b"\0", 1)[0], size
    if kind == 120:  # 'x': pax extended header of the next member
        records = pax_overrides(data)
        if records is None:
            return None
        return (path if records[0] is None else records[0]), (size if records[1] is None else records[1])
    return path, size  # 'K' (GNU long link name) and 'g' (pax global header) change nothing


def scan_python(buf: Any, pos: int, end: int) -> Iterator[Keyed]:
    """Members lying wholly in buf[pos:end], with their pax / GNU long-name headers; see the module
    docstring."""
    view, known, last = memoryview(buf), _known, None
    if len(known) > 100000:
        known.clear()
    group = pos  # the first header of the member being read (its pax / GNU headers come first)
    path: bytes | None = None
    override: int | None = None  # the member size a pax header set
    while end - pos >= BLOCK:
        header = bytes(view[pos:pos + BLOCK])
        kind = header[156]
        if not header[0]:
            break
        expected = known.get(header[148:156])
        if expected is None:
            expected = known[header[148:156]] = _expected_adler(header[148:156])
        size = known.get(header[124:136])
        if size is None:
            size = known[header[124:136]] = _plain_octal(header[124:136])
        if expected != adler32(header) & 0xFFFF or size < 0:
            break
        start = pos + BLOCK
        if kind in SPECIAL:
            stop = start + size
            overrides = None if stop > end else _special_overrides(kind, view[start:stop], path, override)
            if overrides is None:
                break
            path, override = overrides
            pos = stop + (-size % BLOCK)
            continue
        if override is not None:
            size = override
        stop = start + size
        if stop + (-size % BLOCK) > end:
            break
        if path is None:
            cut = header.find(b"\0", 0, 100)  # header_name and split_name inlined: a hot loop
            path = header[:cut] if cut >= 0 else header[:100]
            if header[345] and header[257:265] == POSIX_MAGIC:
                path = header[345:500].split(b"\0", 1)[0] + b"/" + path
        last = name = path.decode("utf-8", "surrogateescape")
        group = pos = stop + (-size % BLOCK)
        path = override = None
        if kind in REGULAR and (name[:2] != "__" or not META.match(name)):
            slash = name.rfind("/")
            dot = name.find(".", slash + 1)
            if dot <= slash + 1:
                yield name, None, None, bytes(view[start:stop])
            else:
                yield name, name[:dot], name[dot + 1:].lower(), bytes(view[start:stop])
    return group, last
