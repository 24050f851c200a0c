"""The `~TenBin~` chunk framing (docs/protocol.md 2): chunks ⇄ one buffer ⇄ a binary stream.

Each chunk is framed as the 8 bytes `MAGIC`, an int64 payload length, then the payload zero-padded
to a multiple of `ALIGN` (64) bytes. The framing knows nothing of arrays: `tensorcom.tenbin` frames
its header/data chunks with it (and re-exports these names, its 0.1 API), `tensorcom.wire` the frames
of a single-part message. Buffers and streams are checked by the same rules (`_payload_length`,
`_check_padding`): a wrong magic, a negative length or padding that is not zero bytes raises
DecodeError naming the chunk index. Pure: no sockets.
"""

from __future__ import annotations

import os
import struct
from typing import Any, BinaryIO, Iterable

from .errors import DecodeError

MAGIC = b"~TenBin~"
ALIGN = 64
_LENGTH = struct.Struct("<q")
_ZEROS = bytes(ALIGN)
_READ_BLOCK = 1 << 20  # unseekable streams are read in pieces this size (a lying length allocates little)


def roundup(n: int, k: int = ALIGN) -> int:
    """Smallest multiple of k that is >= n."""
    return k * ((n + k - 1) // k)


def byte_view(obj: Any, index: int | None = None, unit: str = "chunk") -> memoryview:
    """A flat unsigned-byte memoryview of a buffer-like (bytes, memoryview, ndarray, zmq.Frame)."""
    try:
        view = obj if type(obj) is memoryview else memoryview(obj)
    except TypeError:
        buffer = getattr(obj, "buffer", None)  # zmq.Frame without the buffer protocol
        if buffer is None:
            raise DecodeError(f"a {type(obj).__name__} is not a buffer", index, unit) from None
        view = memoryview(buffer)
    if not view.c_contiguous:
        raise DecodeError("buffer is not C-contiguous", index, unit)
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")


def _at(offset: int | None) -> str:
    """` at byte N` for errors in a buffer; nothing for a stream."""
    return "" if offset is None else f" at byte {offset}"


def _payload_length(prefix: Any, index: int, offset: int | None = None) -> int:
    """The payload length of a chunk's 16-byte prefix; DecodeError (chunk `index`) for a wrong magic
    or a negative length. `offset`: where the prefix lies in a buffer (None in a stream)."""
    if prefix[:8] != MAGIC:
        raise DecodeError(f"wrong magic {bytes(prefix[:8])!r}{_at(offset)}", index)
    (length,) = _LENGTH.unpack_from(prefix, 8)
    if length < 0:
        raise DecodeError(f"negative chunk length {length}{_at(offset)}", index)
    return length


def _check_padding(padding: Any, index: int, offset: int | None = None) -> None:
    """DecodeError (chunk `index`) unless the bytes after a payload are zero bytes."""
    if padding != _ZEROS[:len(padding)]:
        raise DecodeError(f"padding after the chunk{_at(offset)} is not zero bytes", index)


def encode_chunks(chunks: Iterable[Any]) -> bytearray:
    """Chunks -> one buffer: per chunk `~TenBin~`, int64 length, payload zero-padded to 64 bytes."""
    views = [byte_view(chunk, index) for index, chunk in enumerate(chunks)]
    result = bytearray(sum(16 + roundup(view.nbytes) for view in views))
    target = memoryview(result)
    offset = 0
    for view in views:
        target[offset:offset + 8] = MAGIC
        _LENGTH.pack_into(result, offset + 8, view.nbytes)
        target[offset + 16:offset + 16 + view.nbytes] = view
        offset += 16 + roundup(view.nbytes)
    return result


def decode_chunks(buf: Any) -> list[memoryview]:
    """One buffer -> list of memoryviews of its chunk payloads (no copy); DecodeError naming the chunk
    for a wrong magic, a length past the end, or padding that is not zero bytes."""
    view = byte_view(buf)
    total = view.nbytes
    chunks: list[memoryview] = []
    offset = 0
    while offset < total:
        index = len(chunks)
        if total - offset < 16:
            raise DecodeError(f"truncated chunk prefix at byte {offset}", index)
        length = _payload_length(view[offset:offset + 16], index, offset)
        start, end, stop = offset + 16, offset + 16 + length, offset + 16 + roundup(length)
        if stop > total:
            raise DecodeError(f"length {length} at byte {offset} runs past the end ({total} bytes)", index)
        _check_padding(view[end:stop], index, offset)
        chunks.append(view[start:end])
        offset = stop
    return chunks


def write_chunk(stream: BinaryIO, chunk: Any) -> None:
    """Write one framed chunk (magic, length, payload, padding) to a binary stream."""
    view = byte_view(chunk)
    stream.write(MAGIC + _LENGTH.pack(view.nbytes))
    stream.write(view)
    stream.write(_ZEROS[:roundup(view.nbytes) - view.nbytes])


def _remaining(stream: BinaryIO) -> int | None:
    """Bytes left in a seekable stream, None when the stream cannot tell."""
    try:
        if not stream.seekable():
            return None
        here = stream.tell()
        end = stream.seek(0, os.SEEK_END)
        stream.seek(here)
        return end - here
    except (AttributeError, OSError, ValueError):
        return None


def fill(stream: BinaryIO, buffer: bytearray) -> int:
    """Read from `stream` (with `readinto`) into `buffer` until it is full or the stream ends; the number
    of bytes read (less than len(buffer) only at the end of the stream)."""
    view, got = memoryview(buffer), 0
    while got < len(buffer):
        count = stream.readinto(view[got:])
        if not count:
            break
        got += count
    return got


def _read_exact(stream: BinaryIO, size: int, index: int, what: str, may_end: bool = False) -> bytes | bytearray:
    """Exactly `size` bytes; b"" when `may_end` and the stream is at its end; DecodeError (chunk `index`)
    when it ends inside `what`, naming how many of the bytes came.

    Large reads from seekable streams go into one buffer after checking the stream is long enough;
    others proceed in `_READ_BLOCK` pieces, so a lying length never allocates much more than exists.
    """
    left = _remaining(stream) if size > _READ_BLOCK else None
    if left is not None and hasattr(stream, "readinto"):
        if left < size:
            raise DecodeError(f"stream ends inside {what}: {left} of {size} bytes", index)
        buffer = bytearray(size)
        got = fill(stream, buffer)
        if got < size:
            raise DecodeError(f"stream ends inside {what}: {got} of {size} bytes", index)
        return buffer
    data = stream.read(min(size, _READ_BLOCK))
    if data and len(data) < size:
        data = bytearray(data)
        while len(data) < size and (piece := stream.read(min(size - len(data), _READ_BLOCK))):
            data += piece
    if len(data) < size and (data or not may_end):
        raise DecodeError(f"stream ends inside {what}: {len(data)} of {size} bytes", index)
    return data


def read_chunk(stream: BinaryIO, index: int = 0) -> bytes | bytearray | None:
    """Read one framed chunk's payload; None at a clean end of stream; DecodeError (chunk `index`) for
    a wrong magic, a truncated chunk or padding that is not zero bytes."""
    prefix = _read_exact(stream, 16, index, "a chunk prefix", may_end=True)
    if not prefix:
        return None
    length = _payload_length(prefix, index)
    data = _read_exact(stream, length, index, "a chunk") if length else b""
    padding = roundup(length) - length
    if padding:
        _check_padding(_read_exact(stream, padding, index, "chunk padding"), index)
    return data
