"""wire: the metadata frame of protocol v2 (docs/protocol.md 4.2, 4.3, 6): the plain-values budget,
integer and string fields, map keys, ext forms, timestamps, tuples through a Connection."""

from __future__ import annotations

import math
import time
import tracemalloc

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorcom import _metadata, wire
from tensorcom.errors import DecodeError

HEADER = [("v", 2), ("kind", "batch"), ("seq", 0), ("epoch", 0), ("sender", "s")]


class Raw(bytes):
    """msgpack bytes to put into a frame as they are."""


def packed(value) -> bytes:
    return bytes(value) if isinstance(value, Raw) else msgpack.packb(value, use_bin_type=True)


def metadata(*pairs, batch=Raw(b"\x90"), **fields) -> bytes:
    """Frame 0 packed by hand: HEADER (with `fields` replacing values), then `pairs` (repeats allowed),
    then the batch (msgpack bytes or a value; ... leaves it out)."""
    entries = [(key, fields.pop(key, value)) for key, value in HEADER] + list(fields.items()) + list(pairs)
    if batch is not ...:
        entries.append(("batch", batch))
    return wire.MAGIC + msgpack.Packer().pack_map_header(len(entries)) + b"".join(
        packed(key) + packed(value) for key, value in entries)


def refusal(frames, **options) -> DecodeError:
    """The DecodeError decoding `frames` raises; it must name frame 0."""
    with pytest.raises(DecodeError) as caught:
        wire.decode_message(frames, **options)
    assert caught.value.index == 0 and "(frame 0)" in str(caught.value), caught.value
    return caught.value


# ---------------------------------------------------------------- the plain-values budget

N = 16 * 2**20
CRAFTED = {  # batch structures of 16 MiB whose decoded objects would take 0.3-1.3 GiB
    "empty lists": b"\xdd" + N.to_bytes(4, "big") + b"\x90" * N,
    "small ints": b"\xdd" + N.to_bytes(4, "big") + b"\x07" * N,
    "one-item lists": b"\xdd" + (N // 2).to_bytes(4, "big") + b"\x91\xc0" * (N // 2),
    "empty maps as values": b"\xdf" + (N // 2).to_bytes(4, "big") + b"\xa0\x80" * (N // 2),
    "3-byte ints": b"\xdd" + (N // 3).to_bytes(4, "big") + b"\xcd\x01\x00" * (N // 3),
    "1-byte bins": b"\xdd" + (N // 3).to_bytes(4, "big") + b"\xc4\x01\x00" * (N // 3),
    "lists never closed": b"".join(b"\xdc\xff\xff" + b"\x01" * 65534 for _ in range(256)),
    "a tuple": b"\xc9" + (N + 5).to_bytes(4, "big") + b"\x02\xdd" + N.to_bytes(4, "big") + b"\x90" * N,
}


ONE_BYTE_OBJECTS = {"empty lists", "small ints", "one-item lists", "empty maps as values", "lists never closed",
                    "a tuple"}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_16_mb_metadata_is_refused_quickly_and_small(name):
    frame = metadata(batch=Raw(CRAFTED[name]))
    assert len(frame) > 16 * 10**6
    start = time.process_time()
    error = refusal([frame])
    elapsed = time.process_time() - start
    assert "more than 1000000 msgpack objects" in str(error) and "max_plain_values" in str(error)
    assert elapsed < 5, f"{elapsed:.1f} s of CPU"  # under 0.5 s for objects of 2 bytes or more, 10 ms else
    budget = 10**6 if name in ONE_BYTE_OBJECTS else 10**5  # tracing slows down the walk over longer objects
    tracemalloc.start()
    try:
        refusal([frame], max_plain_values=budget)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"{peak / 2**20:.1f} MiB"  # the walk builds nothing (decoding: 0.3 to 1.3 GiB)


def test_crafted_metadata_is_refused_in_single_buffer_form_too():
    buffer = wire.frames_to_buffer([metadata(batch=Raw(CRAFTED["empty lists"]))])
    refusal([buffer])


def test_the_default_budget_comes_from_the_environment(monkeypatch):
    frames = wire.encode_batch({"labels": list(range(100))})
    monkeypatch.setenv("TENSORCOM_MAX_PLAIN_VALUES", "50")
    assert "more than 50 msgpack objects" in str(refusal(frames))
    assert wire.decode_message(frames, max_plain_values=1000).batch == {"labels": list(range(100))}
    monkeypatch.delenv("TENSORCOM_MAX_PLAIN_VALUES")
    assert wire.decode_message(frames).batch == {"labels": list(range(100))}


def test_a_budget_passed_by_the_receiver_reads_no_environment(monkeypatch):
    frames = wire.encode_batch({"labels": [1, 2]})
    monkeypatch.setenv("TENSORCOM_MAX_PLAIN_VALUES", "not a number")
    assert wire.decode_message(frames, max_plain_values=100).batch == {"labels": [1, 2]}
    with pytest.raises(ValueError, match="TENSORCOM_MAX_PLAIN_VALUES"):
        wire.decode_message(frames)


@pytest.mark.parametrize("batch, objects", [
    ({"labels": [1, 2, 3]}, 12 + 1 + 1 + 4),  # map + 10 header objects + "batch" | map | "labels" | list and 3 ints
    ([(1, 2)], 12 + 1 + 4),  # list | tuple ext, its payload array, 2 ints
    ([np.zeros(2)], 12 + 1 + 1),  # list | array reference
    ({}, 12 + 1),
])
def test_the_budget_is_exact(batch, objects):
    frames = wire.encode_batch(batch)
    assert _metadata.count_objects(frames[0][len(wire.MAGIC):], 10**6) == objects
    assert wire.decode_message(frames, max_plain_values=objects).protocol == 2
    assert f"more than {objects - 1} " in str(refusal(frames, max_plain_values=objects - 1))


def test_payloads_longer_than_the_budget_are_counted_not_refused():
    batch = {"text": "x" * 5000, "raw": b"\xd6\xff" * 100, "labels": list(range(10))}
    frames = wire.encode_batch(batch)
    assert wire.decode_message(frames, max_plain_values=40).batch == batch  # 5 KB, about 30 objects


NORMAL = [
    {"images": np.zeros((4, 2, 2, 3), "u1"), "labels": [3, 1, 4, 1], "__key__": ["a/0", "a/1", "a/2", "a/3"]},
    {"captions": {"en": "a cat", "fr": "un chat"}, "boxes": [(0.5, 1.5, 2.0, 3.0), (1.0, 1.0, 2.0, 2.0)]},
    [np.arange(3), ((1, (2, (3, "deep"))), [None, True, b"\x00"])],
    {"labels": list(range(100_000)), "scores": [0.5] * 100_000},  # 200,000 plain values: under the default
]


@pytest.mark.parametrize("batch", NORMAL, ids=["labels", "strings", "nested tuples", "200k values"])
def test_normal_batches_with_plain_values_decode(batch):
    frames = wire.encode_batch(batch, seq=3)
    message = wire.decode_message(frames)
    assert repr(message.batch) == repr(batch) and message.seq == 3
    objects = _metadata.count_objects(frames[0][len(wire.MAGIC):], 10**6)
    assert repr(wire.decode_message(frames, max_plain_values=objects).batch) == repr(batch)


@pytest.mark.parametrize("shape", [b"\x80", b"\x90", b"\xa2ab", b"\xcf" + bytes(8), b"\x81\xa1a\xc0",
                                   b"\xd5\x02\x91\xc0"])
def test_a_decoded_object_takes_less_than_100_bytes(shape):
    items = 30_000
    frame = metadata(batch=Raw(b"\xdd" + items.to_bytes(4, "big") + shape * items))
    objects = _metadata.count_objects(frame[len(wire.MAGIC):], 10**6)
    tracemalloc.start()
    try:
        message = wire.decode_message([frame])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(message.batch) == items and peak < 100 * objects, peak / objects


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10"])
def test_max_plain_values_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="max_plain_values"):
        wire.decode_message(wire.encode_batch([1]), max_plain_values=bad)


def python_objects(value) -> int:
    """The msgpack objects a decoded value came from (the rule of docs/protocol.md 6)."""
    if isinstance(value, dict):
        return 1 + sum(python_objects(k) + python_objects(v) for k, v in value.items())
    if isinstance(value, list):
        return 1 + sum(map(python_objects, value))
    if isinstance(value, tuple):  # the ext, then its payload array
        return 2 + sum(map(python_objects, value))
    return 1


def plain_unpack(data: bytes):
    """msgpack's own decoding, arrays as 0 and tuples as tuples: the reference for the count."""

    def hook(code, payload):
        return tuple(msgpack.unpackb(payload, ext_hook=hook, raw=False, strict_map_key=False)) if code == 2 else 0

    return msgpack.unpackb(data, ext_hook=hook, raw=False, strict_map_key=False)


plain = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
         | st.text(max_size=40) | st.binary(max_size=300))
structures = st.recursive(plain | st.just(np.zeros(1)), lambda inner: st.lists(inner, max_size=20) | st.tuples(inner)
                          | st.dictionaries(st.text(max_size=5), inner, max_size=20), max_leaves=60)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(structures, max_size=5))
def test_property_the_count_is_the_decoders(batch):
    frames = wire.encode_batch(batch, seq=2**40, sender="a sender")
    meta = plain_unpack(bytes(frames[0][len(wire.MAGIC):]))
    assert _metadata.count_objects(frames[0][len(wire.MAGIC):], 10**6) == python_objects(meta)
    assert _metadata.count_objects(frames[0][len(wire.MAGIC):], 5) == 6  # stops just past the limit


# ---------------------------------------------------------------- integer and string fields


@pytest.mark.parametrize("field, value, expected", [
    ("seq", 5.0, 5), ("seq", float(2**53 - 1), 2**53 - 1), ("epoch", 2.0**40, 2**40), ("epoch", -0.0, 0),
    ("seq", 2**64 - 1, 2**64 - 1), ("v", 2.0, 2),
])
def test_integral_floats_below_2_53_stand_for_integers(field, value, expected):
    message = wire.decode_message([metadata(**{field: value})])
    if field != "v":
        assert getattr(message, field) == expected and type(getattr(message, field)) is int


def test_float32_integral_values_count_too():
    frame = wire.MAGIC + msgpack.packb({"v": 2, "kind": "batch", "seq": 7.0, "epoch": 1.0, "sender": "s",
                                        "batch": []}, use_single_float=True)
    assert frame.count(b"\xca") == 2  # float 32
    message = wire.decode_message([frame])
    assert (message.seq, message.epoch) == (7, 1)


def test_marker_and_portion_integers_may_be_integral_floats():
    frame = metadata(("group", "g"), ("group_size", 3.0), ("share", ["s", 1.0, 2]), kind="end_of_epoch", batch=...)
    message = wire.decode_message([frame])
    assert message.group_size == 3 and message.portion == wire.Portion("s", 1, 2) and type(message.portion.worker) is int


@pytest.mark.parametrize("field, value", [
    ("seq", 5.5), ("seq", float(2**53)), ("seq", math.nan), ("epoch", math.inf), ("seq", -1.0), ("seq", -1),
    ("seq", True), ("epoch", "5"), ("seq", None), ("v", 3), ("v", "2"), ("v", 2.5),
])
def test_other_values_of_integer_fields_are_refused(field, value):
    error = str(refusal([metadata(**{field: value})]))
    assert f"{field}=" in error or "unsupported protocol version" in error


@pytest.mark.parametrize("kind", ["BATCH", "hello", "", b"batch", 1, None])
def test_unknown_kinds_are_refused(kind):
    assert "unknown message kind" in str(refusal([metadata(kind=kind)]))


@pytest.mark.parametrize("fields", [{"sender": b"s"}, {"sender": 5}, {"group": b"g"}])
def test_string_fields_are_msgpack_str(fields):
    refusal([metadata(**fields)])


@pytest.mark.parametrize("share", [["s", 2, 2], ["s", 0.5, 2], ["s", 0, 0], [b"s", 0, 1], ["s", 0],
                                   Raw(msgpack.packb(msgpack.ExtType(2, msgpack.packb(["s", 0, 1]))))])  # a tuple
def test_bad_portions_are_refused(share):
    assert "share" in str(refusal([metadata(("share", share))]))


def test_unknown_metadata_keys_are_ignored():
    assert wire.decode_message([metadata(("later", {"x": 1}), (7, "not a string key"))]).batch == []


# ---------------------------------------------------------------- map keys and duplicates


def test_repeated_metadata_keys_are_refused():
    assert "repeats a key" in str(refusal([metadata(("seq", 1))]))
    assert "repeats a key" in str(refusal([metadata(("batch", []))]))


def test_repeated_keys_inside_the_batch_keep_the_last_value():
    batch = Raw(b"\x82" + packed("x") + packed(1) + packed("x") + packed(2))
    assert wire.decode_message([metadata(batch=batch)]).batch == {"x": 2}


def test_keys_other_than_strings_decode_as_python_values():
    batch = {1: "int", b"k": "bytes", None: "nil", 2.5: "float", (1, "x"): "tuple", "s": "str"}
    assert wire.decode_message(wire.encode_batch(batch)).batch == batch


@pytest.mark.parametrize("key", [
    Raw(b"\x91\x01"),  # array
    Raw(b"\x80"),  # map
    Raw(b"\xd6\x01\x00\x00\x00\x00"),  # array reference
    Raw(b"\xd5\x02\x91\x90"),  # tuple holding a list
])
def test_unhashable_keys_are_refused(key):
    frames = [metadata(batch=Raw(b"\x81" + key + b"\x01")), *wire.encode_batch([np.zeros(1)])[1:]]
    refusal(frames)


# ---------------------------------------------------------------- ext forms


def reference(index: int, form: str) -> Raw:
    """An array reference (ext 1, 4-byte big-endian index) in one msgpack ext form."""
    payload = index.to_bytes(4, "big")
    head = {"fixext 4": b"\xd6", "ext 8": b"\xc7\x04", "ext 16": b"\xc8\x00\x04", "ext 32": b"\xc9\x00\x00\x00\x04"}
    return Raw(head[form] + b"\x01" + payload)


@pytest.mark.parametrize("form", ["fixext 4", "ext 8", "ext 16", "ext 32"])
def test_array_references_in_every_ext_form(form):
    arrays = wire.encode_batch([np.arange(3.0)])[1:]
    batch = wire.decode_message([metadata(batch=Raw(b"\x91" + reference(0, form))), *arrays]).batch
    assert len(batch) == 1 and batch[0].tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("head, size", [
    (b"\xd4\x01", 1), (b"\xd5\x01", 2), (b"\xd7\x01", 8), (b"\xd8\x01", 16), (b"\xc7\x00\x01", 0), (b"\xc7\x03\x01", 3),
    (b"\xc7\x05\x01", 5), (b"\xc8\x00\x05\x01", 5),
])
def test_array_references_of_other_sizes_are_refused(head, size):
    arrays = wire.encode_batch([np.arange(3.0)])[1:]
    error = refusal([metadata(batch=Raw(b"\x91" + head + bytes(size))), *arrays])
    assert f"payload of {size} bytes" in str(error) and "must be 4 bytes" in str(error)


@pytest.mark.parametrize("head", [b"\xd5\x02", b"\xc7\x02\x02", b"\xc8\x00\x02\x02", b"\xc9\x00\x00\x00\x02\x02"])
def test_tuples_in_every_ext_form(head):
    assert wire.decode_message([metadata(batch=Raw(b"\x91" + head + b"\x91\x07"))]).batch == [(7,)]


def test_tensorcom_writes_the_shortest_ext_forms():
    frame = bytes(wire.encode_batch([(), (1,), (1, 2), (1, 2, 3), np.zeros(1)])[0])
    batch = frame.split(b"\xa5batch")[-1]  # after the last "batch": the key, not the kind
    empty, one = b"\xd4\x02\x90", b"\xd5\x02\x91\x01"  # fixext 1, fixext 2
    two, three = b"\xc7\x03\x02\x92\x01\x02", b"\xd6\x02\x93\x01\x02\x03"  # ext 8, fixext 4
    assert batch == b"\x95" + empty + one + two + three + b"\xd6\x01" + bytes(4)  # payloads of 1, 2, 3, 4 bytes


def test_a_tuple_payload_must_be_one_array():
    assert "bad msgpack" in str(refusal([metadata(batch=Raw(b"\x91\xc7\x03\x02\x91\x07\x00"))]))  # trailing 00


TIMESTAMPS = {
    "fixext 4": msgpack.packb(msgpack.Timestamp(1)),
    "fixext 8": msgpack.packb(msgpack.Timestamp(1, 5)),
    "ext 8 of 12": msgpack.packb(msgpack.Timestamp(2**40, 5)),
    "ext 8 of 4": b"\xc7\x04\xff" + bytes(4),
    "ext 16 of 8": b"\xc8\x00\x08\xff" + bytes(8),
    "ext 32 of 12": b"\xc9\x00\x00\x00\x0c\xff" + bytes(12),
}


@pytest.mark.parametrize("name", sorted(TIMESTAMPS))
@pytest.mark.parametrize("budget", [10**6, 30])
def test_msgpack_timestamps_are_refused(name, budget):
    batch = Raw(b"\x92" + TIMESTAMPS[name] + packed("x" * 40))  # the budget of 30 walks the payload
    assert "unknown msgpack ext type -1" in str(refusal([metadata(batch=batch)], max_plain_values=budget))


@pytest.mark.parametrize("code", [0, 3, 127, -2, -128])
def test_other_ext_types_are_refused(code):
    ext = Raw(b"\xd6" + (code % 256).to_bytes(1, "big") + b"abcd")  # fixext 4
    assert f"unknown msgpack ext type {code}" in str(refusal([metadata(batch=Raw(b"\x91" + ext))]))


# ---------------------------------------------------------------- tuples through a Connection


@pytest.mark.net
def test_a_connection_turns_a_top_level_tuple_into_a_list_and_keeps_nested_tuples():
    from tensorcom import Connection

    batch = (np.ones(2, "f4"), (1, (2, 3)), [(4,), {"k": (5, np.zeros(1, "f4"))}])
    with Connection("zrpull+inproc://test-wire-tuples", timeout=10) as receiver, \
            Connection("zrpush+inproc://test-wire-tuples", timeout=10) as sender:
        sender.send(batch)
        sender.send({"pair": (1, (2,))})
        received, named = receiver.recv(), receiver.recv()
    decoded = wire.decode_message(wire.encode_batch(batch)).batch
    assert type(decoded) is tuple and type(received) is list
    expected = "[(1, (2, 3)), [(4,), {'k': (5, array([0.], dtype=float32))}]]"
    assert repr(received[1:]) == repr(list(decoded[1:])) == expected
    assert named == {"pair": (1, (2,))}
