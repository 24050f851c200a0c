"""tenbin and its chunk framing (tensorcom._framing, through tenbin's names): byte compatibility with
tensorcom 0.1, round trips, zero-copy decoding, bad input."""

from __future__ import annotations

import inspect
import io
import mmap
import os
import struct
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensorcom import tenbin
from tensorcom.errors import DecodeError, EncodeError

ALL_DTYPES = ["f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1", "c8", "c16"]


def framed(payload: bytes) -> bytes:
    """One chunk of the single-buffer form, built by hand: magic, int64 length, payload, zero padding."""
    padded = -(-len(payload) // 64) * 64
    return b"~TenBin~" + struct.pack("<q", len(payload)) + payload + bytes(padded - len(payload))


def example_320() -> bytes:
    """DESIGN.md's example, written by hand the way tensorcom 0.1 writes it on x86-64."""
    data0 = np.arange(6, dtype="<f4").tobytes()
    data1 = np.array([7, -8], dtype="<i2").tobytes()
    header0 = b"f4".ljust(8, b"\0") + b"img".ljust(8, b"\0") + struct.pack("<3q", 2, 2, 3)
    header1 = b"i2".ljust(8, b"\0") + b"cls".ljust(8, b"\0") + struct.pack("<2q", 1, 2)
    return framed(header0) + framed(data0) + framed(header1) + framed(data1)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bytes (NaN-safe)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_design_example_is_byte_for_byte_320_bytes():
    arrays = [np.arange(6, dtype="f4").reshape(2, 3), np.array([7, -8], dtype="i2")]
    buf = tenbin.encode_buffer(arrays, infos=["img", "cls"])
    expected = example_320()
    assert len(expected) == 320 and bytes(buf) == expected
    assert expected[:48] == (b"~TenBin~" + bytes([40, 0, 0, 0, 0, 0, 0, 0]) + b"f4" + bytes(6)
                             + b"img" + bytes(5) + struct.pack("<2q", 2, 2))
    decoded, infos = tenbin.decode_buffer(expected, infos=True)
    assert infos == ["img", "cls"]
    assert all(same(x, y) for x, y in zip(decoded, arrays))


@pytest.mark.parametrize("code", ALL_DTYPES)
def test_every_dtype_round_trips(code):
    a = (np.arange(24) % 7).astype(code).reshape(2, 3, 4)
    chunks = tenbin.encode_list([a])
    assert bytes(chunks[0][:8]).rstrip(b"\0") == code.encode()
    (b,) = tenbin.decode_list(chunks)
    assert same(a, b)


def test_ranks_zero_to_nine_and_empty_arrays():
    arrays = [np.ones((1,) * rank, dtype="u4") for rank in range(10)]
    arrays += [np.zeros((0, 5), "f4"), np.zeros((3, 0, 2), bool), np.array(2.5)]
    decoded = tenbin.decode_buffer(tenbin.encode_buffer(arrays))
    assert all(same(x, y) for x, y in zip(decoded, arrays)) and len(decoded) == len(arrays)


def test_rank_ten_and_dtypes_without_code_are_refused():
    with pytest.raises(EncodeError, match="rank 10"):
        tenbin.encode_list([np.zeros((1,) * 10)])
    for bad in [np.array(["a"]), np.array([object()]), np.zeros(2, "longdouble"), np.zeros(2, "M8[s]")]:
        with pytest.raises(EncodeError, match="dtype"):
            tenbin.encode_list([bad])


def test_non_contiguous_and_big_endian_inputs():
    base = np.arange(60, dtype="i4").reshape(3, 4, 5)
    inputs = [base.T, base[:, ::2, 1:], np.asfortranarray(base), base.astype(">i4"), base[::-1]]
    decoded = tenbin.decode_list(tenbin.encode_list(inputs))
    for original, result in zip(inputs, decoded):
        assert np.array_equal(original, result) and result.dtype == np.dtype("<i4")
        assert result.flags.c_contiguous


def test_encode_does_not_copy_contiguous_data():
    a = np.arange(1000, dtype="f8").reshape(10, 100)
    header, data = tenbin.encode_list([a])
    assert isinstance(header, bytes) and len(data) == a.nbytes
    assert np.shares_memory(np.frombuffer(data, dtype="f8"), a)


def test_decoding_100mb_does_not_copy():
    big = np.empty(100 * 2**20, dtype=np.uint8)
    big[::4096] = 7
    (view,) = tenbin.decode_list(tenbin.encode_list([big.reshape(-1, 1024)]))
    assert np.shares_memory(view, big) and view.shape == (100 * 1024, 1024)
    buf = tenbin.encode_buffer([big])
    (from_buffer,) = tenbin.decode_buffer(buf)
    assert np.shares_memory(from_buffer, np.frombuffer(buf, dtype=np.uint8))
    assert from_buffer.flags.writeable and from_buffer[4096] == 7


def test_views_are_read_only_when_the_buffer_is():
    (a,) = tenbin.decode_buffer(bytes(tenbin.encode_buffer([np.arange(3)])))
    assert not a.flags.writeable and list(a) == [0, 1, 2]


def test_decode_chunks_returns_views_and_encode_chunks_frames():
    chunks = [b"abc", b"", bytes(range(64)), bytearray(b"x" * 65)]
    buf = tenbin.encode_chunks(chunks)
    assert isinstance(buf, bytearray) and len(buf) == 80 + 16 + 80 + 144
    assert bytes(buf) == b"".join(framed(bytes(c)) for c in chunks)
    decoded = tenbin.decode_chunks(buf)
    assert [bytes(c) for c in decoded] == [bytes(c) for c in chunks]
    assert all(isinstance(c, memoryview) and c.obj is buf for c in decoded)


def test_infos_labels_validation_and_checking():
    arrays = [np.zeros(1), np.ones(2)]
    chunks = tenbin.encode_list(arrays, infos=["a", "12345678"])
    assert tenbin.decode_list(chunks, infos=True)[1] == ["a", "12345678"]
    assert len(tenbin.decode_list(chunks, infos=["a", "12345678"])) == 2
    with pytest.raises(DecodeError) as caught:
        tenbin.decode_list(chunks, infos=["a", "other"])
    assert caught.value.index == 2
    for bad in (["123456789", ""], ["é", ""], ["a\0", ""]):
        with pytest.raises(ValueError, match="info"):
            tenbin.encode_list(arrays, infos=bad)
    with pytest.raises(ValueError, match="one label per array"):
        tenbin.encode_list(arrays, infos=["a"])


def header(code: bytes, rank: int, dims: list[int], info: bytes = b"") -> bytes:
    return code.ljust(8, b"\0") + info.ljust(8, b"\0") + struct.pack(f"<q{len(dims)}q", rank, *dims)


BAD_LISTS = {
    "odd count": ([header(b"f4", 1, [2]), bytes(8), header(b"f4", 1, [2])], 2),
    "unknown dtype": ([header(b"x9", 1, [2]), bytes(8)], 0),
    "absurd rank": ([header(b"f4", 10**6, [2]), bytes(8)], 0),
    "negative rank": ([header(b"f4", -1, []), b""], 0),
    "rank/size mismatch": ([header(b"f4", 2, [2]), bytes(8)], 0),
    "short header": ([b"f4\0\0", bytes(8)], 0),
    "negative dim": ([header(b"u1", 2, [-2, -4]), bytes(8)], 0),
    "absurd shape": ([header(b"u1", 3, [2**40, 2**40, 2**40]), bytes(8)], 1),
    "huge shape, no data": ([header(b"f8", 2, [0, 2**62]), b""], 1),
    "length mismatch": ([header(b"i2", 1, [3]), bytes(5)], 1),
    "non-ascii info": ([header(b"u1", 1, [1], info=b"\xff"), bytes(1)], 0),
    "NUL inside info": ([header(b"u1", 1, [1], info=b"a\0b"), bytes(1)], 0),
    "NUL before info": ([header(b"u1", 1, [1], info=b"\0ab"), bytes(1)], 0),
    "NUL inside dtype": ([header(b"f\x004", 1, [1]), bytes(4)], 0),
    "byte after dtype padding": ([header(b"f4\0\0\0\0\0x", 1, [1]), bytes(4)], 0),
    "second pair": ([header(b"u1", 1, [1]), b"x", header(b"u1", 1, [2]), b"x"], 3),
    "not a buffer": ([header(b"u1", 1, [1]), 12], 1),
}


@pytest.mark.parametrize("name", sorted(BAD_LISTS))
def test_malformed_chunk_lists_name_the_chunk(name):
    chunks, index = BAD_LISTS[name]
    with pytest.raises(DecodeError) as caught:
        tenbin.decode_list(chunks)
    assert caught.value.index == index and f"chunk {index}" in str(caught.value)


def test_malformed_buffers_name_the_chunk():
    good = example_320()
    cases = [
        (b"garbage!" * 4, 0),
        (good[:-1], 3),  # truncated padding of the last chunk
        (good[:100], 1),  # truncated payload
        (good[:88], 1),  # truncated prefix
        (good[:80] + b"~TenBad~" + good[88:], 1),
        (good[:88] + struct.pack("<q", 2**62) + good[96:], 1),
        (good[:88] + struct.pack("<q", -5) + good[96:], 1),
        (good[:60] + b"\x01" + good[61:], 0),  # non-zero padding after the 40-byte header
        (good[:-1] + b"\x80", 3),  # non-zero padding at the very end
    ]
    for buf, index in cases:
        with pytest.raises(DecodeError) as caught:
            tenbin.decode_buffer(buf)
        assert caught.value.index == index, (buf[:20], caught.value)


@pytest.mark.parametrize("position, index", [(60, 0), (319, 3)])
def test_non_zero_padding_is_refused_by_every_reader(tmp_path, position, index):
    bad = bytearray(example_320())
    bad[position] = 0x20
    path = tmp_path / "bad.ten"
    path.write_bytes(bad)
    readers = [lambda: tenbin.decode_buffer(bytes(bad)), lambda: tenbin.read(io.BytesIO(bytes(bad))),
               lambda: tenbin.read(Unseekable(bytes(bad))), lambda: tenbin.load(path),
               lambda: tenbin.load(path, mmap=True)]
    for read in readers:
        with pytest.raises(DecodeError, match="padding") as caught:
            read()
        assert caught.value.index == index


def test_info_is_the_ascii_before_the_nul_padding():
    full = [header(b"u1", 1, [1], info=b"abcdefgh"), b"x", header(b"u1", 1, [1], info=b"ab"), b"y"]
    assert tenbin.decode_list(full, infos=True)[1] == ["abcdefgh", "ab"]
    with pytest.raises(DecodeError, match="after its NUL padding"):
        tenbin.decode_list([header(b"u1", 1, [1], info=b"ab\0\0c"), b"x"])


def test_streams_round_trip_and_count():
    arrays = [np.arange(5, dtype="u2"), np.ones((2, 2), "c8"), np.zeros(70, "i1")]
    stream = io.BytesIO()
    tenbin.write(stream, arrays, infos=["a", "b", "c"])
    assert stream.getvalue() == bytes(tenbin.encode_buffer(arrays, infos=["a", "b", "c"]))
    stream.seek(0)
    first = tenbin.read(stream, n=2)
    rest, infos = tenbin.read(stream, infos=True)
    assert len(first) == 2 and same(first[1], arrays[1]) and same(rest[0], arrays[2]) and infos == ["c"]
    assert tenbin.read(stream) == []


def test_truncated_stream_raises_decode_error():
    buf = example_320()
    for cut in (8, 80, 100, 161, 300):
        with pytest.raises(DecodeError):
            tenbin.read(io.BytesIO(buf[:cut]))


class Unseekable(io.RawIOBase):
    """A pipe-like stream: readable, not seekable."""

    def __init__(self, data: bytes):
        self.source = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:
        data = self.source.read(len(target))
        target[: len(data)] = data
        return len(data)


def test_lying_length_never_allocates_much(tmp_path):
    liar = b"~TenBin~" + struct.pack("<q", 2**50) + b"x" * 100
    path = tmp_path / "liar.ten"
    path.write_bytes(liar)
    tracemalloc.start()
    try:
        for make in (lambda: open(path, "rb"), lambda: io.BytesIO(liar), lambda: Unseekable(liar)):
            with make() as stream, pytest.raises(DecodeError, match="stream ends"):
                tenbin.read(stream)
        with pytest.raises(DecodeError):
            tenbin.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20


def test_big_chunk_from_unseekable_stream():
    arrays = [np.arange(3 * 2**20 // 8, dtype="i8")]
    (back,) = tenbin.read(Unseekable(bytes(tenbin.encode_buffer(arrays))))
    assert same(back, arrays[0])


@pytest.mark.parametrize("cut, index, message", [
    (None, None, None),
    (88, 1, "inside a chunk prefix: 8 of 16 bytes"),
    (256 + 23000, 3, "inside a chunk: 23000 of 24008 bytes"),
    (256 + 24008 + 20, 3, "inside chunk padding: 20 of 56 bytes"),
])
def test_a_pipe_whose_writer_dies_mid_chunk(cut, index, message):
    """An os.pipe read as it fills (short reads), its writer closing it after `cut` bytes as a dying peer
    does: whole, it round-trips; cut, the error names the chunk and how many of its bytes came."""
    arrays = [np.arange(10, dtype="i4"), np.arange(3001, dtype="f8")]  # chunks of 80, 80, 80, 16 + 24008 + 56
    data = bytes(tenbin.encode_buffer(arrays))[:cut]
    read_fd, write_fd = os.pipe()

    def write() -> None:
        with open(write_fd, "wb", buffering=0) as out:
            for start in range(0, len(data), 4096):
                out.write(data[start:start + 4096])

    writer = threading.Thread(target=write)
    writer.start()
    with open(read_fd, "rb", buffering=0) as stream:
        if cut is None:
            assert all(same(a, b) for a, b in zip(tenbin.read(stream), arrays, strict=True))
        else:
            with pytest.raises(DecodeError, match=f"stream ends {message}") as caught:
                tenbin.read(stream)
            assert caught.value.index == index
    writer.join()


def test_save_load_and_mmap(tmp_path):
    path = tmp_path / "data.ten"
    arrays = [np.arange(12, dtype="f4").reshape(3, 4), np.array([True, False])]
    tenbin.save(str(path), *arrays, infos=["x", "y"])
    assert path.read_bytes() == bytes(tenbin.encode_buffer(arrays, infos=["x", "y"]))
    loaded = tenbin.load(path)
    assert all(same(x, y) for x, y in zip(loaded, arrays)) and loaded[0].flags.writeable
    mapped, infos = tenbin.load(path, infos=True, mmap=True)
    assert infos == ["x", "y"] and all(same(x, y) for x, y in zip(mapped, arrays))
    assert not mapped[0].flags.writeable
    owner = mapped[0]
    while isinstance(owner, np.ndarray):
        owner = owner.base
    assert isinstance(owner.obj, mmap.mmap)
    empty = tmp_path / "empty.ten"
    empty.write_bytes(b"")
    assert tenbin.load(empty, mmap=True) == [] and tenbin.load(empty) == []


@pytest.mark.net
def test_zmq_send_and_receive_through_real_sockets(inproc_pair):
    sender, receiver = inproc_pair
    arrays = [np.arange(10**5, dtype="f4"), np.array([1, 2], "u4")]
    tenbin.zsend_multipart(sender, arrays, infos=["a", "b"])
    got, infos = tenbin.zrecv_multipart(receiver, infos=True)
    assert infos == ["a", "b"] and all(same(x, y) for x, y in zip(got, arrays))
    assert not got[0].flags.owndata  # a view of the received frame
    tenbin.zsend_single(sender, arrays)
    got = tenbin.zrecv_single(receiver)
    assert all(same(x, y) for x, y in zip(got, arrays)) and not got[0].flags.owndata


# ---------------------------------------------------------------- properties

array_strategy = hnp.arrays(
    dtype=st.sampled_from(ALL_DTYPES).map(np.dtype),
    shape=hnp.array_shapes(min_dims=0, max_dims=9, min_side=0, max_side=3),
)
info_strategy = st.text(st.characters(min_codepoint=1, max_codepoint=127), max_size=8)
fast = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@fast
@given(st.lists(st.tuples(array_strategy, info_strategy), max_size=5), st.booleans())
def test_property_round_trip(pairs, strided):
    arrays = [a[::-1] if strided and a.ndim else a for a, _ in pairs]
    infos = [info for _, info in pairs]
    back, back_infos = tenbin.decode_list(tenbin.encode_list(arrays, infos=infos), infos=True)
    assert back_infos == infos and all(same(x, y) for x, y in zip(arrays, back))
    back, back_infos = tenbin.decode_buffer(tenbin.encode_buffer(arrays, infos=infos), infos=True)
    assert back_infos == infos and all(same(x, y) for x, y in zip(arrays, back))


def decode_or_decode_error(function, data) -> None:
    try:
        function(data)
    except DecodeError:
        pass


@fast
@given(st.binary(max_size=400))
def test_property_random_bytes_only_raise_decode_error(data):
    decode_or_decode_error(tenbin.decode_buffer, data)
    decode_or_decode_error(tenbin.decode_buffer, b"~TenBin~" + data)
    decode_or_decode_error(tenbin.read, io.BytesIO(data))


@fast
@given(st.lists(st.binary(max_size=100), max_size=6))
def test_property_random_chunks_only_raise_decode_error(chunks):
    decode_or_decode_error(tenbin.decode_list, chunks)


@fast
@given(st.data())
def test_property_mutated_buffers_only_raise_decode_error(data):
    buf = bytearray(example_320())
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(buf) - 1))
        buf[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        buf = buf[: data.draw(st.integers(0, len(buf)))]
    decode_or_decode_error(tenbin.decode_buffer, bytes(buf))
    decode_or_decode_error(tenbin.read, io.BytesIO(bytes(buf)))


def plain_signature(function) -> str:
    """`name(a, *b, c=None)`: a signature as docs/protocol.md writes it, without annotations."""
    parts = []
    for parameter in inspect.signature(function).parameters.values():
        text = ("*" if parameter.kind is parameter.VAR_POSITIONAL else "") + parameter.name
        parts.append(text if parameter.default is parameter.empty else f"{text}={parameter.default!r}")
    return f"{function.__name__}({', '.join(parts)})"


def test_protocol_md_gives_the_signatures_of_save_and_load():
    text = (Path(__file__).parents[1] / "docs" / "protocol.md").read_text()
    for function in (tenbin.save, tenbin.load):
        assert f"tenbin.{plain_signature(function)}" in text, plain_signature(function)
