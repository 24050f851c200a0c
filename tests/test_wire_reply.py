"""wire: the session fields of protocol 2 (docs/protocol.md 4.3): the `reply` key, the `tick` kind,
`with_reply` (a resend's new transmission number) and `peek_session` (a refused message's session)."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from tensorcom import tenbin, wire
from tensorcom.errors import DecodeError, MessageTooLarge

REPLY = wire.Reply(("tcp://10.0.0.1:5000", "ipc:///tmp/feed.ack-0123abcd"), "0123abcd89ef4567", 7, 12)
BATCH = {"x": np.arange(1000, dtype="f4").reshape(10, 100), "y": np.arange(10, dtype="i2"), "k": ["a"]}


def meta_frame(**fields) -> bytes:
    """A v2 metadata frame: a valid empty batch, with `fields` changed (... removes a key)."""
    meta = {"v": 2, "kind": "batch", "seq": 0, "epoch": 0, "sender": "s", "batch": []}
    meta.update(fields)
    return wire.MAGIC + msgpack.packb({k: v for k, v in meta.items() if v is not ...}, use_bin_type=True)


def header_and_data() -> list:
    """One tenbin pair (an array's header and data frames)."""
    return tenbin.encode_list([np.zeros(3, "u1")])


# ---- the reply key ----------------------------------------------------------------------------------


def test_reply_round_trips_on_batches_and_markers():
    batch = wire.decode_message(wire.encode_batch(BATCH, seq=7, sender="s", reply=REPLY))
    marker = wire.decode_message(wire.encode_end_of_epoch(seq=8, epoch=0, sender="s", reply=REPLY))
    assert batch.reply == marker.reply == REPLY
    assert isinstance(batch.reply, wire.Reply) and isinstance(batch.reply.addresses, tuple)
    assert batch.seq == 7 and np.array_equal(batch.batch["x"], BATCH["x"])


def test_no_reply_is_none_and_writes_no_key():
    frames = wire.encode_batch(BATCH, sender="s")
    assert wire.decode_message(frames).reply is None
    assert b"reply" not in bytes(frames[0])
    assert wire.decode_message([meta_frame(reply=None)]).reply is None  # nil: absent


def test_reply_with_no_addresses_round_trips():
    reply = wire.Reply((), "t", 0, 0)
    assert wire.decode_message(wire.encode_batch([], sender="s", reply=reply)).reply == reply


def test_reply_accepts_integral_floats_as_other_integers():
    assert wire.decode_message([meta_frame(reply=[[], "t", 3.0, 4.0])]).reply == wire.Reply((), "t", 3, 4)


MALFORMED_REPLIES = {
    "a map": {"addresses": [], "token": "t", "floor": 0, "tx": 0},
    "a string": "tcp://h:1",
    "three items": [[], "t", 0],
    "five items": [[], "t", 0, 0, 0],
    "addresses not an array": ["tcp://h:1", "t", 0, 0],
    "an address not a str": [[b"tcp://h:1"], "t", 0, 0],
    "token bin": [[], b"t", 0, 0],
    "token nil": [[], None, 0, 0],
    "floor negative": [[], "t", -1, 0],
    "floor a fraction": [[], "t", 0.5, 0],
    "tx a string": [[], "t", 0, "1"],
    "tx a bool": [[], "t", 0, True],
    "tx nil": [[], "t", 0, None],
}


@pytest.mark.parametrize("name", sorted(MALFORMED_REPLIES))
def test_a_malformed_reply_is_a_decode_error_naming_frame_0(name):
    with pytest.raises(DecodeError) as caught:
        wire.decode_message([meta_frame(reply=MALFORMED_REPLIES[name])])
    assert caught.value.index == 0 and "reply" in str(caught.value)


# ---- ticks ------------------------------------------------------------------------------------------


def test_a_tick_decodes_as_kind_tick_with_no_batch():
    frames = wire.encode_tick(seq=5, epoch=0, sender="s", reply=REPLY)
    assert len(frames) == 1
    tick = wire.decode_message(frames)
    assert (tick.kind, tick.batch, tick.seq, tick.sender, tick.reply) == ("tick", None, 5, "s", REPLY)
    assert "tick" in wire.KINDS


def test_a_tick_in_single_part_form_decodes_too():
    buffer = wire.frames_to_buffer(wire.encode_tick(seq=0, epoch=0, sender="s", reply=REPLY))
    assert wire.decode_message([buffer]).kind == "tick"


@pytest.mark.parametrize("frames", [
    [meta_frame(kind="tick", batch=[])],
    [meta_frame(kind="tick", batch=...), *header_and_data()],
], ids=["with a batch", "with arrays"])
def test_a_tick_with_a_batch_or_arrays_is_a_decode_error(frames):
    with pytest.raises(DecodeError) as caught:
        wire.decode_message(frames)
    assert caught.value.index == 0 and "tick" in str(caught.value)


def test_encode_tick_checks_its_header():
    with pytest.raises(ValueError):
        wire.encode_tick(seq=-1, epoch=0, sender="s", reply=REPLY)


# ---- with_reply -------------------------------------------------------------------------------------


def test_with_reply_changes_only_the_reply_and_keeps_the_array_frames():
    frames = wire.encode_batch(BATCH, seq=3, epoch=2, sender="s", reply=REPLY,
                               portion=wire.Portion("stream", 1, 4))
    later = REPLY._replace(floor=9, tx=40)
    resent = wire.with_reply(frames, later)
    assert len(resent) == len(frames) and all(a is b for a, b in zip(resent[1:], frames[1:]))
    before, after = wire.decode_message(frames), wire.decode_message(resent)
    assert after.reply == later
    assert (after.kind, after.seq, after.epoch, after.sender, after.portion) == \
           (before.kind, before.seq, before.epoch, before.sender, before.portion)
    assert list(after.batch) == list(before.batch) and after.batch["k"] == ["a"]
    assert all(np.array_equal(after.batch[k], before.batch[k]) for k in ("x", "y"))


def test_with_reply_on_a_marker_keeps_its_group():
    frames = wire.encode_end_of_epoch(seq=4, epoch=1, sender="s", group="g", group_size=3, reply=REPLY)
    after = wire.decode_message(wire.with_reply(frames, REPLY._replace(tx=99)))
    assert (after.kind, after.group, after.group_size, after.epoch, after.reply.tx) == \
           ("end_of_epoch", "g", 3, 1, 99)


def test_with_reply_adds_a_reply_to_a_message_without_one():
    frames = wire.encode_batch([np.ones(2, "u1")], sender="s")
    assert wire.decode_message(wire.with_reply(frames, REPLY)).reply == REPLY


# ---- peek_session -----------------------------------------------------------------------------------


def test_peek_session_reads_a_too_large_messages_session():
    frames = wire.encode_batch(BATCH, seq=11, sender="s", reply=REPLY)
    with pytest.raises(MessageTooLarge):
        wire.decode_message(frames, max_size=1000)
    assert wire.peek_session(frames) == ("s", 11, "batch", REPLY)


def test_peek_session_reads_a_marker_with_a_bad_array_count():
    marker = wire.encode_end_of_epoch(seq=2, epoch=0, sender="m", reply=REPLY)
    frames = [marker[0], *header_and_data()]  # undecodable: a marker carries no arrays
    with pytest.raises(DecodeError):
        wire.decode_message(frames)
    assert wire.peek_session(frames) == ("m", 2, "end_of_epoch", REPLY)


@pytest.mark.parametrize("frames", [
    tenbin.encode_list([np.zeros(3, "f4")]),
    [bytes(tenbin.encode_buffer([np.zeros(3, "f4")]))],
    [b"garbage", b"more"],
    [wire.MAGIC + b"\xc1\xc1"],
    [],
    [meta_frame()],
    [meta_frame(reply=[[], "t"])],
], ids=["v1 multipart", "v1 single buffer", "garbage", "magic then garbage", "no frames",
        "v2 without reply", "v2 with a short reply"])
def test_peek_session_is_none_for_what_it_cannot_read(frames):
    assert wire.peek_session(frames) is None


def test_peek_session_does_not_read_a_metadata_frame_over_its_limit():
    frames = wire.encode_batch({"pad": "p" * 500}, seq=1, sender="s", reply=REPLY)
    assert wire.peek_session(frames, limit=len(frames[0]) - 1) is None
    assert wire.peek_session(frames, limit=len(frames[0])) == ("s", 1, "batch", REPLY)
