"""tenbin: numpy arrays ⇄ chunks ⇄ one buffer ⇄ streams and `.ten` files (tensorcom 0.1 format).

Byte-compatible with tensorcom 0.1; the layout is specified in docs/protocol.md. In short:

- an array is two chunks, a header (little-endian int64s `[dtype, info, rank, dim_0, ...]`, where
  `dtype` and `info` are ASCII strings NUL-padded to 8 bytes, no byte but NUL after the first NUL)
  and its raw C-order data;
- the single-buffer form (single-part messages, `.ten` files) frames each chunk as `~TenBin~`, an
  int64 length, and the payload zero-padded to a multiple of 64 bytes (readers check the zeros);
  that framing is `tensorcom._framing`, whose functions (`encode_chunks`, `decode_chunks`,
  `write_chunk`, `read_chunk`, `byte_view`, `roundup`) are re-exported here, as 0.1 had them.

Encoding never copies C-contiguous arrays (the data chunk is a memoryview of the array); decoding
never copies at all (arrays are views of the chunks, read-only when the chunks are). Malformed input
raises `tensorcom.errors.DecodeError` naming the chunk index. Pure: no sockets; the `z*` functions
only duck-type a pyzmq socket.
"""

from __future__ import annotations

import math
import mmap as _mmap
import os
import struct
import sys
from typing import Any, BinaryIO, Iterable, Sequence

import numpy as np

from ._framing import ALIGN as ALIGN
from ._framing import MAGIC as MAGIC
from ._framing import byte_view, decode_chunks, encode_chunks, read_chunk, write_chunk
from ._framing import fill as fill
from ._framing import roundup as roundup
from .errors import DecodeError, EncodeError

MAX_RANK = 9  # tensorcom 0.1 asserts rank < 10 when encoding
MAX_INFO = 8
# Codes are numpy's type strings without the byte-order character. 0.1 knew the first eleven
# (its own table misspelled uint32, so it could not send u4); b1, c8 and c16 are new in 0.2.
DTYPE_CODES: dict[str, str] = {
    "float16": "f2", "float32": "f4", "float64": "f8",
    "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8",
    "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8",
    "bool": "b1", "complex64": "c8", "complex128": "c16",
}
_ENCODE: dict[str, bytes] = {np.dtype(name).str[1:]: code.encode() for name, code in DTYPE_CODES.items()}
_DECODE: dict[bytes, np.dtype] = {
    code.encode().ljust(8, b"\0"): np.dtype(name).newbyteorder("<") for name, code in DTYPE_CODES.items()
}
_HEAD = struct.Struct("<8s8sq")
_DIMS = [struct.Struct(f"<{rank}q") for rank in range(MAX_RANK + 1)]
_NUL = b"\0"


# ---------------------------------------------------------------- arrays ⇄ chunks


def _as_encodable(a: Any, index: int) -> np.ndarray:
    """`a` as a little-endian, C-contiguous ndarray of a tenbin dtype (copying only when needed)."""
    if not isinstance(a, np.ndarray):
        a = np.asarray(a)
    key = a.dtype.str[1:]
    if key not in _ENCODE:
        raise EncodeError(f"array {index}: dtype {a.dtype} has no tenbin code (codes: {sorted(_ENCODE)})")
    if a.ndim > MAX_RANK:
        raise EncodeError(f"array {index}: rank {a.ndim} > {MAX_RANK} (shape {a.shape}) is not allowed by tenbin")
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder != "little"):
        a = a.astype(a.dtype.newbyteorder("<"))
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a


def _info_bytes(info: Any, index: int) -> bytes:
    """The 8-byte field for a per-array info label: ASCII, at most 8 characters, no NUL."""
    if not isinstance(info, str):
        raise TypeError(f"array {index}: info must be a str, not {info!r}")
    if len(info) > MAX_INFO or not info.isascii() or "\0" in info:
        raise ValueError(f"array {index}: info {info!r} must be at most {MAX_INFO} ASCII characters, no NUL")
    return info.encode("ascii")


def encode_header(a: np.ndarray, info: str = "", index: int = 0) -> bytes:
    """The header chunk of an (already encodable) array: `[dtype, info, rank, dims...]` as int64s."""
    head = _HEAD.pack(_ENCODE[a.dtype.str[1:]], _info_bytes(info, index), a.ndim)
    return head + _DIMS[a.ndim].pack(*a.shape)


def _data_view(a: np.ndarray) -> memoryview:
    """A flat byte memoryview of a C-contiguous array's data (no copy)."""
    if a.size == 0:
        return memoryview(b"")
    return memoryview(a).cast("B")


def encode_list(arrays: Iterable[Any], infos: Sequence[str] | None = None) -> list:
    """Arrays -> `[header_0, data_0, header_1, data_1, ...]`.

    Headers are bytes; each data chunk is a flat memoryview of the array itself (a copy is made only
    for non-C-contiguous or big-endian input). `infos`, if given, has one label per array.
    """
    arrays = list(arrays)
    if infos is not None and (isinstance(infos, (str, bytes)) or len(infos) != len(arrays)):
        raise ValueError(f"infos must have one label per array ({len(arrays)}), got {infos!r}")
    chunks: list = []
    for index, a in enumerate(arrays):
        a = _as_encodable(a, index)
        chunks.append(encode_header(a, "" if infos is None else infos[index], index))
        chunks.append(_data_view(a))
    return chunks


def _decode_header(view: memoryview, index: int, unit: str) -> tuple[np.dtype, str, tuple]:
    """(dtype, info, shape) from a header chunk; DecodeError for anything malformed."""
    size = view.nbytes
    if size < _HEAD.size or size % 8:
        raise DecodeError(f"header of {size} bytes is not 3 + rank int64s", index, unit)
    code, info, rank = _HEAD.unpack_from(view)
    dtype = _DECODE.get(code)
    if dtype is None:
        raise DecodeError(f"unknown dtype code {code.rstrip(_NUL)!r}", index, unit)
    if not 0 <= rank <= MAX_RANK:
        raise DecodeError(f"rank {rank} outside 0..{MAX_RANK}", index, unit)
    if size != _HEAD.size + 8 * rank:
        raise DecodeError(f"header of {size} bytes does not match rank {rank}", index, unit)
    shape = _DIMS[rank].unpack_from(view, _HEAD.size)
    if min(shape, default=0) < 0:
        raise DecodeError(f"negative dimension in shape {shape}", index, unit)
    label, _, padding = info.partition(_NUL)
    if padding.strip(_NUL):
        raise DecodeError(f"info {info!r} has bytes after its NUL padding", index, unit)
    try:
        return dtype, label.decode("ascii"), shape
    except UnicodeDecodeError:
        raise DecodeError(f"info {info!r} is not ASCII", index, unit) from None


def decode_array(header: Any, data: Any, index: int = 0, unit: str = "chunk") -> tuple[np.ndarray, str]:
    """(array, info) from one header/data pair; the array is a view of `data`.

    `index` is the position of the header (the data chunk is index + 1), used in error messages.
    """
    dtype, info, shape = _decode_header(byte_view(header, index, unit), index, unit)
    view = byte_view(data, index + 1, unit)
    expected = math.prod(shape) * dtype.itemsize
    if view.nbytes != expected:
        raise DecodeError(f"data of {view.nbytes} bytes, but {dtype} {shape} needs {expected}", index + 1, unit)
    try:
        array = np.frombuffer(view, dtype=dtype).reshape(shape)
    except ValueError as exc:
        raise DecodeError(f"cannot view data as {dtype} {shape}: {exc}", index + 1, unit) from None
    return array, info


def decode_arrays(chunks: Sequence[Any], first: int = 0, unit: str = "chunk") -> tuple[list, list]:
    """(arrays, infos) from header/data chunk pairs; errors name `first + position` as the index."""
    if len(chunks) % 2:
        raise DecodeError(f"odd number of {unit}s ({len(chunks)}): headers and data must pair up",
                          first + len(chunks) - 1, unit)
    arrays, infos = [], []
    for position in range(0, len(chunks), 2):
        array, info = decode_array(chunks[position], chunks[position + 1], first + position, unit)
        arrays.append(array)
        infos.append(info)
    return arrays, infos


def _check_infos(arrays: list, infos: list, wanted: Any) -> Any:
    """0.1's `infos` argument: False/None -> arrays, True -> (arrays, infos), a list -> verified arrays."""
    if wanted is None or wanted is False:
        return arrays
    if wanted is True:
        return arrays, infos
    if not isinstance(wanted, (list, tuple)):
        raise TypeError(f"infos must be a bool or a list of expected labels, not {wanted!r}")
    for index, (expected, actual) in enumerate(zip(wanted, infos)):
        if expected != actual:
            raise DecodeError(f"info {actual!r} where {expected!r} was required", 2 * index)
    return arrays


def decode_list(chunks: Sequence[Any], infos: Any = False) -> Any:
    """`[header, data, ...]` -> list of arrays viewing the data chunks (no copy).

    infos=True returns `(arrays, infos)`; a list of labels checks them (0.1 behaviour).
    """
    arrays, labels = decode_arrays(list(chunks))
    return _check_infos(arrays, labels, infos)


# ---------------------------------------------------------------- arrays ⇄ one buffer


def encode_buffer(arrays: Iterable[Any], infos: Sequence[str] | None = None) -> bytearray:
    """Arrays -> the single-buffer form (one copy of the data)."""
    return encode_chunks(encode_list(arrays, infos=infos))


def decode_buffer(buf: Any, infos: Any = False) -> Any:
    """The single-buffer form -> list of arrays viewing `buf` (no copy); `infos` as in decode_list."""
    return decode_list(decode_chunks(buf), infos=infos)


# ---------------------------------------------------------------- streams and files


def write(stream: BinaryIO, arrays: Iterable[Any], infos: Sequence[str] | None = None) -> None:
    """Write arrays to a binary stream in the single-buffer form."""
    for chunk in encode_list(arrays, infos=infos):
        write_chunk(stream, chunk)


def read(stream: BinaryIO, n: int = sys.maxsize, infos: Any = False) -> Any:
    """Read up to `n` arrays (fewer at end of stream) written by `write`; `infos` as in decode_list."""
    chunks: list = []
    while len(chunks) < 2 * n:
        header = read_chunk(stream, len(chunks))
        if header is None:
            break
        data = read_chunk(stream, len(chunks) + 1)
        if data is None:
            raise DecodeError("stream ends after a header, before its data", len(chunks) + 1)
        chunks += [header, data]
    return decode_list(chunks, infos=infos)


def save(path: str | os.PathLike, *arrays: Any, infos: Sequence[str] | None = None, nocheck: bool = True) -> None:
    """Write arrays (positional, one or more) to a `.ten` file in the single-buffer form, replacing it;
    `infos` has one label per array. 0.1's `nocheck` is accepted and ignored: no suffix is enforced."""
    with open(path, "wb") as stream:
        write(stream, arrays, infos=infos)


def load(path: str | os.PathLike, infos: Any = False, mmap: bool = False, nocheck: bool = True) -> Any:
    """Read every array of a `.ten` file: a list of arrays, or `(arrays, infos)` with infos=True (a
    list of labels checks them, as in decode_list). 0.1's `nocheck` is accepted and ignored.

    mmap=False reads the file into one writable buffer; mmap=True maps it and returns read-only
    views of the mapping (the mapping lives as long as any returned array).
    """
    with open(path, "rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        if mmap and size:
            buf: Any = memoryview(_mmap.mmap(stream.fileno(), 0, access=_mmap.ACCESS_READ))
        else:
            buf = bytearray(size)
            got = stream.readinto(buf)
            if got != size:
                raise DecodeError(f"{path}: read {got} of {size} bytes", None)
    return decode_buffer(buf, infos=infos)


# ---------------------------------------------------------------- pyzmq sockets (duck-typed)


def zsend_multipart(socket: Any, arrays: Iterable[Any], infos: Sequence[str] | None = None) -> Any:
    """Send arrays as one multipart message, without copying the data in Python."""
    return socket.send_multipart(encode_list(arrays, infos=infos), copy=False)


def zrecv_multipart(socket: Any, infos: Any = False) -> Any:
    """Receive a multipart message; the arrays are views of the received frames."""
    return decode_list(socket.recv_multipart(copy=False), infos=infos)


def zsend_single(socket: Any, arrays: Iterable[Any], infos: Sequence[str] | None = None) -> Any:
    """Send arrays as one single-part message (the single-buffer form)."""
    return socket.send(encode_buffer(arrays, infos=infos), copy=False)


def zrecv_single(socket: Any, infos: Any = False) -> Any:
    """Receive a single-part message; the arrays are views of the received frame."""
    return decode_buffer(socket.recv(copy=False), infos=infos)

