"""The sharing protocol's control frame (zshare / zsplit / zjoin): kind and fields ⇄ bytes. Pure.

Every message between a sharing server and a consumer starts with one control frame: the 8 bytes
`CONTROL_MAGIC` then a msgpack map whose "k" names the kind. A batch's control frame is followed by the
frames of its protocol-2 wire message, unchanged (docs/protocol.md §7 has the whole protocol).

    consumer -> server   join {name, credit, observe, shm?, session?, server?, upto?, record?},
                         ack {upto, wait?, step?}, leave {}, shm {ok}
    server -> consumer   welcome {server, mode, epoch, pos, resumed?, n?, shm?},
                         batch {n, epoch, pos} + wire frames
                         (or batch {n, epoch, pos, shm: reference}, no frames: handoff),
                         end {epoch, batches, n?}, detached {why}, status {consumers, server?}, bye {}

(`session`, `server`, `upto`, `resumed` and `n` carry a session over a reconnect; batches and ends
are numbered alike by `n`; `record`: a restarted consumer's state, which it catches up from.)
    producer -> server   finish {ends?} (on the server's input: the stream ends after what was sent
                         before, or once `ends` epochs have ended); on its catch-up input: regenerated {stream, epoch,
                         worker, workers, index} + wire frames (a batch made again for consumers
                         catching up, from the catch-up worker)

An ack's optional `wait` and `step` are the consumer's data-wait totals in seconds
(tensorcom.transport.data_wait); `data_wait(meta)` reads them, None when absent or malformed (an
older consumer sends none; an older server ignores them). A status's optional `server` is the
serving process's last report record (rates, and where the time goes: "stages", "verdict"), when it
gave the server one. `located(error, where)` puts the URL (and which message) before a DecodeError's text.
"""

from __future__ import annotations

from typing import Any

import msgpack

from tensorcom.errors import DecodeError

CONTROL_MAGIC = b"\x89TCS\r\n\x1a\n"
VERSION = 1
KINDS = {  # kind -> required fields and the types they must have
    "join": {"name": str, "credit": int},
    "ack": {"upto": int},
    "leave": {},
    "shm": {"ok": bool},
    "welcome": {"server": str, "mode": str, "epoch": int, "pos": int},
    "batch": {"n": int, "epoch": int, "pos": int},
    "end": {"epoch": int, "batches": int},
    "detached": {"why": str},
    "status": {"consumers": list},
    "bye": {},
    "finish": {},
    "regenerated": {"stream": str, "epoch": int, "worker": int, "workers": int, "index": int},
}
MAX_CONTROL_BYTES = 1 << 20  # a status report of many consumers stays far below this


def encode(kind: str, **fields: Any) -> bytes:
    """The control frame of a message of `kind` with `fields` (ValueError for an unknown kind or a
    missing field)."""
    _check(kind, fields, ValueError)
    return CONTROL_MAGIC + msgpack.packb({"v": VERSION, "k": kind, **fields}, use_bin_type=True)


def is_control(frame: Any) -> bool:
    """True when `frame` (bytes-like) starts with the control magic."""
    return bytes(memoryview(frame)[: len(CONTROL_MAGIC)]) == CONTROL_MAGIC


def decode(frame: Any) -> dict:
    """A control frame → its map (with "k"); DecodeError naming frame 0 for anything malformed."""
    view = memoryview(frame)
    if view.nbytes > MAX_CONTROL_BYTES:
        raise DecodeError(f"control frame of {view.nbytes} bytes exceeds {MAX_CONTROL_BYTES}", 0, "frame")
    if not is_control(view):
        raise DecodeError("not a sharing-protocol control frame (bad magic)", 0, "frame")
    try:
        meta = msgpack.unpackb(view[len(CONTROL_MAGIC):], raw=False, strict_map_key=True, max_bin_len=0,
                               max_ext_len=0)
    except Exception as exc:  # msgpack raises several unrelated types for bad bytes
        raise DecodeError(f"control frame is not valid msgpack: {exc}", 0, "frame") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("k"), str):
        raise DecodeError("control frame is not a map with a kind 'k'", 0, "frame")
    _check(meta["k"], meta, lambda text: DecodeError(text, 0, "frame"))
    return meta


def _check(kind: str, fields: dict, error: Any) -> None:
    """Raise error(text) unless `kind` is known and `fields` has its required fields, well typed."""
    if kind not in KINDS:
        raise error(f"unknown control kind {kind!r}")
    for name, expected in KINDS[kind].items():
        value = fields.get(name)
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            raise error(f"control {kind!r} needs {name!r} of type {expected.__name__}, got {value!r}")


def data_wait(meta: dict) -> tuple[float, float] | None:
    """(wait, step) seconds of an ack's optional data-wait fields; None unless both are numbers >= 0."""
    values = meta.get("wait"), meta.get("step")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in values):
        return float(values[0]), float(values[1])
    return None


def located(error: DecodeError, where: str) -> DecodeError:
    """`error` again (its class and frame index kept) with `where` (a URL, what message) before its text."""
    named = type(error)(f"{where}: {error}")
    named.index = error.index
    return named
