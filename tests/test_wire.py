"""wire: protocol v1/v2 messages ⇄ frames, markers, size limits, malformed messages."""

from __future__ import annotations

import enum
import re

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensorcom import tenbin, wire
from tensorcom.errors import DecodeError, EncodeError, MessageTooLarge


def same(x, y) -> bool:
    """Structural equality: same container types, arrays equal in dtype, shape and bytes."""
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
    if type(x) is not type(y):
        return False
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
    if isinstance(x, dict):
        return list(x) == list(y) and all(same(x[k], y[k]) for k in x)
    return x == y


def meta_frame(**fields) -> bytes:
    """A v2 metadata frame with the given fields (defaults: a valid empty batch)."""
    meta = {"v": 2, "kind": "batch", "seq": 0, "epoch": 0, "sender": "s", "batch": []}
    meta.update(fields)
    return wire.MAGIC + msgpack.packb({k: v for k, v in meta.items() if v is not ...}, use_bin_type=True)


def array_ref(index: int) -> msgpack.ExtType:
    return msgpack.ExtType(wire.EXT_ARRAY, index.to_bytes(4, "big"))


SAMPLE = {
    "images": np.arange(24, dtype="u1").reshape(2, 3, 4),
    "labels": np.array([3, 1], dtype="i4"),
    "__key__": ["a/000", "a/001"],
    "meta": {"crop": (1, 2.5), "note": None, "raw": b"\x00\xff", "ok": True},
    "pair": (np.float32(1.5), [np.zeros((2, 0)), "x"]),
}


def test_dict_batch_round_trip_with_views_and_metadata():
    frames = wire.encode_batch(SAMPLE, seq=7, epoch=3, sender="conn-1", infos=["im", "", "", ""])
    assert frames[0][: len(wire.MAGIC)] == wire.MAGIC and len(frames) == 1 + 2 * 4
    message = wire.decode_message(frames)
    expected = dict(SAMPLE, pair=(np.array(1.5, "f4"), [np.zeros((2, 0)), "x"]))
    assert same(message.batch, expected)
    assert (message.kind, message.seq, message.epoch, message.sender, message.protocol) == ("batch", 7, 3, "conn-1", 2)
    assert message.group is None and message.group_size == 1 and message.infos == ("im", "", "", "")
    assert message.nbytes == sum(memoryview(f).nbytes for f in frames)
    assert np.shares_memory(message.batch["images"], SAMPLE["images"])  # views of the frames, which view the input


@pytest.mark.parametrize("batch", [[], (), {}, [np.ones(3)], (np.ones(3), "a", [1, (2, 3)]), {"x": {"y": [np.ones(1)]}}])
def test_containers_round_trip_in_both_forms(batch):
    frames = wire.encode_batch(batch, seq=1)
    assert same(wire.decode_message(frames).batch, batch)
    buffer = wire.frames_to_buffer(frames)
    assert isinstance(buffer, bytearray)
    assert all(bytes(a) == bytes(b) for a, b in zip(wire.buffer_to_frames(buffer), frames))
    message = wire.decode_message([buffer])
    assert same(message.batch, batch) and message.nbytes == len(buffer)
    assert same(wire.decode_message(bytes(buffer)).batch, batch)  # a bare buffer is one frame


def test_largest_array_data_travels_last_and_infos_keep_the_walk_order():
    images, labels, mask = np.ones((4, 8, 8, 3), np.uint8), np.arange(4, dtype=np.int32), np.zeros((4, 8), bool)
    frames = wire.encode_batch({"images": images, "labels": labels, "mask": mask})
    sizes = [memoryview(f).nbytes for f in frames[2::2]]
    assert sizes == sorted(sizes) and sizes[-1] == images.nbytes
    batch = wire.decode_message(frames).batch
    assert np.array_equal(batch["images"], images) and np.array_equal(batch["labels"], labels)
    assert np.array_equal(batch["mask"], mask)
    labelled = wire.encode_batch([images, labels], infos=["img", "cls"])
    assert memoryview(labelled[2]).nbytes == images.nbytes  # depth-first order kept with infos
    assert wire.decode_message(labelled).infos == ("img", "cls")


def test_single_buffer_arrays_are_views_of_the_buffer():
    buffer = wire.frames_to_buffer(wire.encode_batch({"x": np.arange(1000.0)}))
    message = wire.decode_message([buffer])
    assert np.shares_memory(message.batch["x"], np.frombuffer(buffer, dtype=np.uint8))


def test_protocol_1_is_pure_tensorcom_0_1():
    arrays = [np.arange(6, dtype="f4").reshape(2, 3), np.array([7, -8], dtype="i2")]
    frames = wire.encode_batch(arrays, protocol=1, infos=["img", "cls"])
    assert [bytes(f) for f in frames] == [bytes(f) for f in tenbin.encode_list(arrays, infos=["img", "cls"])]
    message = wire.decode_message(frames)
    assert message.protocol == 1 and message.seq is message.epoch is message.sender is None
    assert same(message.batch, arrays) and message.infos == ("img", "cls")
    single = wire.decode_message([tenbin.encode_buffer(tuple(arrays))])
    assert single.protocol == 1 and same(single.batch, arrays)


@pytest.mark.parametrize("batch, why", [
    ({"x": np.ones(1)}, "list or tuple"),
    ([np.ones(1), "label"], "element 1"),
    ([np.ones(1), [np.ones(1)]], "element 1"),
    (np.ones(3), "list or tuple"),
])
def test_protocol_1_refuses_what_0_1_cannot_read(batch, why):
    with pytest.raises(EncodeError, match=why):
        wire.encode_batch(batch, protocol=1)


def test_v1_frames_from_0_1_decode_without_being_told():
    empty = wire.decode_message([b""])
    assert empty.protocol == 1 and empty.batch == []
    message = wire.decode_message([memoryview(b) for b in tenbin.encode_list([np.zeros(4, "u4")])])
    assert message.protocol == 1 and same(message.batch, [np.zeros(4, "u4")])


def test_end_of_epoch_marker():
    frames = wire.encode_end_of_epoch(seq=11, epoch=2, sender="w0", group="serve-1", group_size=4)
    assert len(frames) == 1
    for form in (frames, [wire.frames_to_buffer(frames)]):
        message = wire.decode_message(form)
        assert (message.kind, message.batch, message.seq, message.epoch) == ("end_of_epoch", None, 11, 2)
        assert (message.sender, message.group, message.group_size, message.protocol) == ("w0", "serve-1", 4, 2)
    plain = wire.decode_message(wire.encode_end_of_epoch(seq=0, epoch=0))
    assert plain.group is None and plain.group_size == 1 and plain.sender == ""


def test_portion_travels_with_batches_and_markers_and_is_optional():
    portion = wire.Portion("serve-1", 1, 3)
    batch = wire.decode_message(wire.encode_batch({"x": 1}, seq=4, epoch=2, sender="s", portion=portion))
    marker = wire.decode_message(wire.encode_end_of_epoch(seq=5, epoch=2, sender="s", portion=portion))
    assert batch.portion == marker.portion == portion and batch.epoch == 2
    assert wire.decode_message(wire.encode_batch({"x": 1}, sender="s")).portion is None
    with pytest.raises(ValueError, match="portion"):
        wire.encode_batch({"x": 1}, sender="s", portion=("s", 3, 3))
    meta = {"v": 2, "kind": "batch", "seq": 0, "epoch": 0, "sender": "s", "batch": [], "share": ["s", -1, 2]}
    with pytest.raises(DecodeError, match="share"):  # the metadata key keeps its name
        wire.decode_message([wire.MAGIC + msgpack.packb(meta)])


def test_a_batch_index_travels_and_is_optional():
    portion = wire.Portion("serve-1", 1, 3)
    frames = wire.encode_batch({"x": 1}, sender="s", portion=portion, index=7)
    assert msgpack.unpackb(bytes(frames[0])[len(wire.MAGIC):])["index"] == 7
    assert wire.decode_message(frames).index == 7
    assert wire.decode_message(wire.encode_batch({"x": 1}, sender="s", portion=portion)).index is None
    assert wire.decode_message(wire.encode_end_of_epoch(seq=0, epoch=0)).index is None


@pytest.mark.parametrize("index", [-1, 1.0, True, "3", 1 << 64])
def test_a_bad_batch_index_is_refused_on_both_sides(index):
    with pytest.raises(EncodeError, match="index"):
        wire.encode_batch({"x": 1}, sender="s", index=index)
    meta = {"v": 2, "kind": "batch", "seq": 0, "epoch": 0, "sender": "s", "batch": [], "index": index}
    if index not in (1.0, 1 << 64):  # an integral float is an integer on the wire; 2**64 does not pack
        with pytest.raises(DecodeError, match="index"):
            wire.decode_message([wire.MAGIC + msgpack.packb(meta)])


def test_the_portion_travels_under_the_share_key():
    frames = wire.encode_batch({"x": 1}, sender="s", portion=wire.Portion("serve-1", 1, 3))
    assert msgpack.unpackb(bytes(frames[0])[len(wire.MAGIC):])["share"] == ["serve-1", 1, 3]


def test_share_is_the_old_name_of_portion():
    assert wire.Share is wire.Portion
    with pytest.warns(DeprecationWarning, match="share= is deprecated, use portion="):
        frames = wire.encode_batch({"x": 1}, sender="s", share=("serve-1", 0, 2))
    with pytest.warns(DeprecationWarning, match="share= is deprecated, use portion="):
        marker = wire.encode_end_of_epoch(seq=1, epoch=0, sender="s", share=("serve-1", 0, 2))
    for message in (wire.decode_message(frames), wire.decode_message(marker)):
        assert message.share == message.portion == ("serve-1", 0, 2)
    with pytest.raises(AttributeError):
        message.share = None
    with pytest.raises(TypeError, match="not both"):
        wire.encode_batch({"x": 1}, sender="s", share=("s", 0, 1), portion=("s", 0, 1))


def test_max_size_is_checked_before_decoding():
    frames = wire.encode_batch([np.zeros(1000, "u1")])
    size = sum(memoryview(f).nbytes for f in frames)
    assert wire.decode_message(frames, max_size=size).nbytes == size
    with pytest.raises(MessageTooLarge):
        wire.decode_message(frames, max_size=size - 1)
    with pytest.raises(MessageTooLarge):  # garbage, but too large is said first
        wire.decode_message([b"\xff" * 100, b"x"], max_size=50)


THREE_FRAMES = [b"\xff" * 100, b"x" * 9, b"y" * 1000]  # 1109 bytes of garbage


@pytest.mark.parametrize("max_size, index", [(99, 0), (100, 1), (109, 2)])
def test_message_too_large_names_the_frame_that_passes_the_maximum(max_size, index):
    with pytest.raises(MessageTooLarge) as caught:
        wire.decode_message(THREE_FRAMES, max_size=max_size)
    assert caught.value.index == index and f"(frame {index})" in str(caught.value)
    assert "1109 bytes" in str(caught.value) and f"maximum of {max_size} bytes" in str(caught.value)


def test_a_message_of_the_maximum_size_is_decoded():
    with pytest.raises(DecodeError) as caught:  # under the maximum: decoded, and refused as garbage
        wire.decode_message(THREE_FRAMES, max_size=1109)
    assert not isinstance(caught.value, MessageTooLarge)


def test_message_too_large_in_single_part_form_names_frame_0():
    buffer = wire.frames_to_buffer(wire.encode_batch([np.zeros(1000, "u1")]))
    with pytest.raises(MessageTooLarge) as caught:
        wire.decode_message(buffer, max_size=len(buffer) - 1)
    assert caught.value.index == 0


class Color(enum.IntEnum):
    RED = 1


def test_plain_value_subclasses_become_plain():
    message = wire.decode_message(wire.encode_batch({"c": Color.RED, "s": np.str_("t"), "b": bytearray(b"q")}))
    assert message.batch == {"c": 1, "s": "t", "b": b"q"} and type(message.batch["c"]) is int


@pytest.mark.parametrize("batch, why", [
    ([{1, 2}], "set"),
    ([object()], "object"),
    ([2**70], "cannot encode"),
    ("text", "list, tuple or dict"),
    (np.ones(3), "list, tuple or dict"),
    ([np.array(["a"])], "dtype"),
])
def test_unencodable_batches(batch, why):
    with pytest.raises(EncodeError, match=why):
        wire.encode_batch(batch)


def test_bad_arguments():
    with pytest.raises(TypeError):
        wire.encode_batch([], seq="1")
    with pytest.raises(ValueError):
        wire.encode_batch([], epoch=-1)
    with pytest.raises(ValueError):
        wire.encode_batch([], protocol=3)
    with pytest.raises(TypeError):
        wire.encode_end_of_epoch(seq=0, epoch=0, sender=5)
    with pytest.raises(ValueError):
        wire.encode_end_of_epoch(seq=0, epoch=0, group_size=0)
    with pytest.raises(ValueError, match="one label per array"):
        wire.encode_batch([np.ones(1)], infos=["a", "b"])


HEADER = tenbin.encode_list([np.zeros(2, "u1")])
MALFORMED = {
    "no frames": ([], None),
    "garbage msgpack": ([wire.MAGIC + b"\xc1"], 0),
    "trailing bytes": ([meta_frame() + b"\x00"], 0),
    "not a map": ([wire.MAGIC + msgpack.packb([1, 2])], 0),
    "version 3": ([meta_frame(v=3)], 0),
    "unknown kind": ([meta_frame(kind="hello")], 0),
    "missing seq": ([meta_frame(seq=...)], 0),
    "negative seq": ([meta_frame(seq=-1)], 0),
    "bool epoch": ([meta_frame(epoch=True)], 0),
    "sender not str": ([meta_frame(sender=5)], 0),
    "batch not container": ([meta_frame(batch=5)], 0),
    "unreferenced array": ([meta_frame(), *HEADER], 0),
    "array referenced twice": ([meta_frame(batch=[array_ref(0), array_ref(0)]), *HEADER], 0),
    "reference out of range": ([meta_frame(batch=[array_ref(1)]), *HEADER], 0),
    "short reference": ([meta_frame(batch=[msgpack.ExtType(1, b"\x00")]), *HEADER], 0),
    "unknown ext": ([meta_frame(batch=[msgpack.ExtType(9, b"")])], 0),
    "tuple payload not array": ([meta_frame(batch=[msgpack.ExtType(2, msgpack.packb(5))])], 0),
    "marker with arrays": ([meta_frame(kind="end_of_epoch", batch=None), *HEADER], 0),
    "bad group_size": ([meta_frame(kind="end_of_epoch", batch=None, group_size=0)], 0),
    "array key": ([meta_frame(batch={array_ref(0): 1}), *HEADER], 0),
    "odd frame count": ([meta_frame(batch=[array_ref(0)]), HEADER[0]], 1),
    "bad tenbin header": ([meta_frame(batch=[array_ref(0), array_ref(1)]), *HEADER, b"zz", b""], 3),
    "length mismatch": ([meta_frame(batch=[array_ref(0)]), HEADER[0], b"abc"], 2),
    "v1 garbage": ([b"hello", b"world"], 0),
    "v1 single garbage": ([b"hello"], 0),
    "single buffer truncated": ([bytes(wire.frames_to_buffer([meta_frame()]))[:40]], 0),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_messages_name_the_frame(name):
    frames, index = MALFORMED[name]
    with pytest.raises(DecodeError) as caught:
        wire.decode_message(frames)
    assert caught.value.index == index, caught.value


def test_deeply_nested_tuples():
    payload = msgpack.packb([])
    for _ in range(wire.MAX_DEPTH + 5):
        payload = msgpack.packb([msgpack.ExtType(wire.EXT_TUPLE, payload)])
    with pytest.raises(DecodeError, match="nested"):
        wire.decode_message([meta_frame(batch=msgpack.ExtType(wire.EXT_TUPLE, payload))])
    nested = ()
    for _ in range(30):
        nested = (nested,)
    assert wire.decode_message(wire.encode_batch([nested])).batch == [nested]


@pytest.mark.net
def test_zmq_frames_decode_zero_copy(inproc_pair):
    sender, receiver = inproc_pair
    batch = {"x": np.arange(10**5, dtype="f4"), "k": ["a"]}
    sender.send_multipart(wire.encode_batch(batch, seq=5), copy=False)
    message = wire.decode_message(receiver.recv_multipart(copy=False))
    assert same(message.batch, batch) and message.seq == 5
    sender.send(wire.frames_to_buffer(wire.encode_end_of_epoch(seq=6, epoch=0)), copy=False)
    assert wire.decode_message(receiver.recv(copy=False)).kind == "end_of_epoch"


# ---------------------------------------------------------------- properties

fast = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
arrays = hnp.arrays(
    dtype=st.sampled_from(["f2", "f4", "f8", "i1", "i8", "u4", "u8", "b1", "c8"]).map(np.dtype),
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=3),
)
plain = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
         | st.text(max_size=10) | st.binary(max_size=10))
leaves = st.recursive(arrays | plain, lambda inner: st.lists(inner, max_size=3) | st.tuples(inner)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
batches = st.lists(leaves, max_size=4) | st.tuples(leaves, leaves) | st.dictionaries(st.text(max_size=5), leaves, max_size=4)


@fast
@given(batches, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.text(max_size=8), st.booleans())
def test_property_round_trip(batch, seq, epoch, sender, single):
    frames = wire.encode_batch(batch, seq=seq, epoch=epoch, sender=sender)
    message = wire.decode_message([wire.frames_to_buffer(frames)] if single else frames)
    assert same(message.batch, batch)
    assert (message.seq, message.epoch, message.sender, message.protocol) == (seq, epoch, sender, 2)


def decode_or_decode_error(frames) -> None:
    try:
        wire.decode_message(frames, max_size=10**6)
    except DecodeError:
        pass


@fast
@given(st.lists(st.binary(max_size=60), max_size=5), st.booleans())
def test_property_random_frames_only_raise_decode_error(frames, with_magic):
    if with_magic and frames:
        frames[0] = wire.MAGIC + frames[0]
    decode_or_decode_error(frames)


@fast
@given(st.data())
def test_property_mutated_messages_only_raise_decode_error(data):
    frames = [bytearray(f) for f in wire.encode_batch(SAMPLE, seq=3, sender="abc")]
    for _ in range(data.draw(st.integers(1, 3))):
        frame = frames[data.draw(st.integers(0, len(frames) - 1))]
        if frame:
            frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        frames = frames[: data.draw(st.integers(0, len(frames)))]
    decode_or_decode_error(frames)
    decode_or_decode_error([bytes(wire.frames_to_buffer(frames))])


def test_worked_example_of_protocol_md():
    frames = wire.encode_batch({"x": np.array([[1, 2, 3]], "u1"), "__key__": ["a"]}, seq=1, epoch=0, sender="s")
    assert [bytes(f).hex() for f in frames] == [
        "89544357 0d0a1a0a 86 a17602 a46b696e64a56261746368 a3736571 01 a565706f636800 a673656e646572a173"
        " a562617463688 2 a178d60100000000 a75f5f6b65795f5f91a161".replace(" ", ""),
        "7531000000000000" + "00" * 8 + "0200000000000000" + "0100000000000000" + "0300000000000000",
        "010203",
    ]
    assert len(wire.frames_to_buffer(frames)) == 304
    marker = wire.encode_end_of_epoch(seq=2, epoch=0, sender="s", group="g", group_size=2)
    assert bytes(marker[0]).hex().endswith("a567726f7570a167aa67726f75705f73697a6502")


@pytest.mark.parametrize("batch, where", [
    ({"image": np.ones(2), "meta": {"tags": [1, {1, 2}]}}, "batch['meta']['tags'][1]"),
    ([np.ones(1), (2, object())], "batch[1][1]"),
    ({"count": 2**70}, "batch['count']"),
])
def test_unencodable_leaf_is_named_by_its_path(batch, where):
    with pytest.raises(EncodeError, match=re.escape(where)):
        wire.encode_batch(batch)
