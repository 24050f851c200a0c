"""The Connection's options dataclasses (tensorcom.transport.options): each checks itself, with the
errors Connection(...) raised before they existed; portion= and its deprecated spelling share=."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from tensorcom import settings, wire
from tensorcom.transport.connection import Connection
from tensorcom.transport.options import Decoding, Encoding, PassOptions, SharingOptions, SocketOptions


@pytest.mark.parametrize("make, message", [
    (lambda: PassOptions(epoch=0), "epoch must be an int >= 1, got 0"),
    (lambda: PassOptions(epoch=True), "epoch must be an int >= 1, got True"),
    (lambda: Encoding(protocol=3), "protocol must be 1 or 2, got 3"),
    (lambda: Encoding(group_size=0), "group_size must be an int >= 1, got 0"),
    (lambda: Encoding(max_message_size=0), "max_message_size must be an int >= 1, got 0"),
    (lambda: SocketOptions(timeout=0), "timeout must be a positive number of seconds or None, got 0"),
    (lambda: SocketOptions(timeout=True), "timeout must be a positive number of seconds or None"),
    (lambda: SocketOptions(liveness=-1.0), "liveness must be a positive number of seconds or None"),
    (lambda: SocketOptions(sndhwm=-1), "sndhwm must be an int >= 0, got -1"),
    (lambda: SocketOptions(rcvhwm=1.5), "rcvhwm must be an int >= 0, got 1.5"),
    (lambda: SocketOptions(senders=0), "senders must be an int >= 1, got 0"),
])
def test_bad_values_raise_value_error_naming_the_option(make, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        make()


@pytest.mark.parametrize("make", [lambda: Encoding(group=3), lambda: Decoding(converters=[3])])
def test_bad_types_raise_type_error(make):
    with pytest.raises(TypeError):
        make()


def test_defaults_are_resolved_once_and_the_groups_are_frozen(monkeypatch):
    monkeypatch.setenv("TENSORCOM_MAX_MESSAGE_SIZE", "4096")
    encoding = Encoding(portion=["s", 0, 2])
    assert encoding.max_message_size == settings.max_message_size() == 4096
    assert encoding.portion == wire.Portion("s", 0, 2) and isinstance(encoding.portion, wire.Portion)
    assert "max_message_size=4096" in encoding.timeout_hint
    assert Encoding(max_message_size=settings.DEFAULT_MAX_MESSAGE_SIZE).timeout_hint == ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        encoding.protocol = 1
    assert Decoding(batch_transforms=abs).batch_transforms == [abs]
    assert Decoding(converters="numpy").converters is not None and Decoding().converters is None


def test_sharing_options_pass_on_what_was_given_to_each_side():
    options = SharingOptions(min_consumers=2, replay=None, credit=3, shm=False)
    assert options.server() == {"min_consumers": 2, "shm": False}
    assert options.consumer() == {"credit": 3, "observe": False, "shm": False}
    assert SharingOptions().given == {"min_consumers": 1, "observe": False}


def test_connection_builds_the_groups_and_reads_each_option_by_name():
    conn = Connection(epoch=7, total=40, timeout=2.5, protocol=1, group="g", group_size=3, raw=True,
                      min_consumers=2, portion=("s", 1, 4))
    try:
        assert conn.passing == PassOptions(epoch=7, total=40)
        assert (conn.epoch, len(conn), conn.total, conn.timeout, conn.protocol) == (7, 7, 40, 2.5, 1)
        assert conn.socket_options.timeout == 2.5 and conn.decoding.raw and conn.raw
        assert (conn.group, conn.group_size) == ("g", 3)
        assert conn.portion == conn.share == wire.Portion("s", 1, 4)
        assert conn.sharing == {"min_consumers": 2, "observe": False}
    finally:
        conn.close()


def test_connection_rejects_what_the_groups_reject():
    with pytest.raises(ValueError, match="epoch must be an int >= 1"):
        Connection(epoch=0)
    with pytest.raises(TypeError, match="group must be a str or None"):
        Connection(group=1)
    with pytest.raises(ValueError, match="stats_horizon must be an int >= 2"):
        Connection(stats_horizon=1)


def test_share_is_the_deprecated_spelling_of_portion():
    with pytest.warns(DeprecationWarning, match="share= is deprecated, use portion="):
        conn = Connection(share=("s", 0, 1))
    assert conn.portion == wire.Portion("s", 0, 1)
    conn.close()
    with pytest.raises(TypeError, match="not both"):
        Connection(share=("s", 0, 1), portion=("s", 0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Connection(portion=("s", 0, 1)).close()
