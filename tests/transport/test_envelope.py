"""The sharing protocol's control frame (tensorcom.transport.sharing.control)."""

from __future__ import annotations

import msgpack
import pytest

from tensorcom.errors import DecodeError, MessageTooLarge
from tensorcom.transport.sharing import control


def test_round_trip():
    frame = control.encode("batch", n=3, epoch=1, pos=7)
    assert control.is_control(frame)
    meta = control.decode(frame)
    assert (meta["k"], meta["n"], meta["epoch"], meta["pos"]) == ("batch", 3, 1, 7)


@pytest.mark.parametrize("frame, match", [
    (b"\x89TCW\r\n\x1a\n" + msgpack.packb({"k": "ack", "upto": 1}), "magic"),
    (control.CONTROL_MAGIC + b"\xc1", "msgpack"),
    (control.CONTROL_MAGIC + msgpack.packb([1, 2]), "kind"),
    (control.CONTROL_MAGIC + msgpack.packb({"k": "steal"}), "unknown"),
    (control.CONTROL_MAGIC + msgpack.packb({"k": "ack", "upto": "7"}), "upto"),
    (control.CONTROL_MAGIC + msgpack.packb({"k": "ack", "upto": True}), "upto"),
    (control.CONTROL_MAGIC + msgpack.packb({"k": "join", "name": "x"}), "credit"),
])
def test_malformed_frames_are_decode_errors_naming_frame_0(frame, match):
    with pytest.raises(DecodeError, match=match) as info:
        control.decode(frame)
    assert info.value.index == 0


def test_encode_refuses_what_decode_would():
    with pytest.raises(ValueError, match="credit"):
        control.encode("join", name="x")
    with pytest.raises(ValueError, match="unknown"):
        control.encode("nonsense")


def test_located_names_where_and_keeps_class_and_frame():
    error = control.located(MessageTooLarge("too large", 2, "frame"), "tcp://127.0.0.1:7880: batch 3")
    assert isinstance(error, MessageTooLarge) and error.index == 2
    assert str(error) == "tcp://127.0.0.1:7880: batch 3: too large (frame 2)"
