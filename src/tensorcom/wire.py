"""wire: protocol messages ⇄ frames (tensorcom protocol v1 and v2; layouts in docs/protocol.md).

A v1 message is pure tensorcom 0.1: `[header_0, data_0, ...]` tenbin chunks for a list of arrays.
A v2 message is a metadata frame — `MAGIC` then a msgpack map (version, kind, seq, epoch, sender,
group, and the batch's structure with plain leaves inline and arrays as references) — followed by
the tenbin header/data pairs of the batch's arrays (largest data last). End-of-epoch markers are v2
messages with no arrays. Either kind may travel as one buffer (`frames_to_buffer`).

`decode_message` tells v1 from v2 by itself; decoded arrays are views of the received frames. The
rules for reading the metadata frame (types of its fields, ext forms, the plain-values budget) live in
`tensorcom._metadata`. Pure: no sockets, no pickle; torch tensors are the transport's business.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

import msgpack
import numpy as np

from . import settings, tenbin
from .checks import renamed_option
from ._metadata import EXT_ARRAY, EXT_TUPLE, KINDS, MAX_DEPTH, VERSION, read_metadata
from .errors import DecodeError, EncodeError, MessageTooLarge

__all__ = ["EXT_ARRAY", "EXT_TUPLE", "KINDS", "MAGIC", "MAX_DEPTH", "VERSION", "Message", "Portion", "Reply", "Share",
           "buffer_to_frames", "decode_message", "encode_batch", "encode_end_of_epoch", "encode_tick", "frames_to_buffer", "peek_session",
           "strided", "with_reply"]

MAGIC = b"\x89TCW\r\n\x1a\n"  # first byte non-ASCII: never a v1 dtype code, never `~TenBin~`
_UINT64 = 1 << 64


class Portion(NamedTuple):
    """Which portion of a served stream a sender sends: worker `worker` of `workers` of `stream` (the
    `share` metadata key on the wire; tensorcom.serve sets it, receivers use it to attribute batches
    and to take a restarted worker for the one it replaces)."""

    stream: str
    worker: int
    workers: int

    def take(self, items: Any) -> Any:
        """This portion's items of `items`: strided(items, worker, workers)."""
        return strided(items, self.worker, self.workers)


def strided(items: Any, worker: int, workers: int) -> Any:
    """Portion `worker` of `workers` of `items`: items worker, worker + workers, worker + 2 × workers, ...
    The one strided split of the package (sources, shard lists, parallel and serving workers, Ray
    actors): a sequence (list, range, array) gives a slice of the same type, any other iterable an
    iterator. ValueError when `worker` is not one of `workers`."""
    if not 0 <= worker < workers:
        raise ValueError(f"worker {worker!r} is not one of {workers!r} workers")
    if hasattr(items, "__getitem__") and hasattr(items, "__len__") and not isinstance(items, dict):
        return items[worker::workers]
    return itertools.islice(items, worker, None, workers)


Share = Portion  # the old name of Portion, kept for code written against it


class Reply(NamedTuple):
    """Where a receiver confirms what it took (the `reply` metadata key, docs/protocol.md 4.3): the
    `addresses` of the sender's acknowledgement socket, a `token` to quote, the sender's `floor`
    (its batches with a lower seq are all confirmed) and this transmission's number `tx`."""

    addresses: tuple
    token: str
    floor: int
    tx: int


@dataclass(frozen=True)
class Message:
    """One decoded message (batch or end-of-epoch marker) and its metadata."""

    kind: str  # "batch" or "end_of_epoch"
    batch: Any  # list / tuple / dict (nested allowed) as sent; None for markers
    seq: int | None  # per-sender sequence number (None for protocol 1)
    epoch: int | None
    sender: str | None  # id of the sending stream (a Connection); None for protocol 1
    group: str | None  # markers: the sender belongs to a group of `group_size` senders
    group_size: int
    protocol: int  # 1 or 2
    nbytes: int  # total bytes of all frames of the message (metadata, headers, data)
    infos: tuple = field(default=())  # tenbin info labels of the arrays, in frame order
    portion: Portion | None = None  # protocol 2, optional: the served portion this sender sends
    reply: Reply | None = None  # protocol 2, optional: where to confirm this transmission
    index: int | None = None  # protocol 2, optional: a served batch's 0-based position in (epoch, portion)

    @property
    def share(self) -> Portion | None:
        """The old name of `portion` (read-only)."""
        return self.portion


# ---------------------------------------------------------------- encoding


def _check_header(seq: Any, epoch: Any, sender: Any, portion: Any = None) -> None:
    """ValueError/TypeError for counters outside 0..2**64-1, a sender that is not a str, or a portion
    that is not (str, worker in 0..workers-1, workers >= 1)."""
    for name, value in (("seq", seq), ("epoch", epoch)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, not {value!r}")
        if not 0 <= value < _UINT64:
            raise ValueError(f"{name} must be in 0..2**64-1, got {value}")
    if not isinstance(sender, str):
        raise TypeError(f"sender must be a str, not {sender!r}")
    if portion is not None and not _valid_portion(portion):
        raise ValueError(f"portion must be (stream: str, worker: int, workers: int) with 0 <= worker < "
                         f"workers, got {portion!r}")


def _valid_portion(portion: Any) -> bool:
    """True for a (stream, worker, workers) triple of exact types with 0 <= worker < workers."""
    if not isinstance(portion, (tuple, list)) or len(portion) != 3:
        return False
    stream, worker, workers = portion
    return (type(stream) is str and type(worker) is int and type(workers) is int
            and 0 <= worker < workers)


def _with_portion(meta: dict, portion: Any, reply: Reply | None = None, index: int | None = None) -> dict:
    """`meta` with the `share` (the portion), `index` and `reply` keys added when given (absent
    otherwise: 0.1-era bytes)."""
    if portion is not None:
        meta["share"] = list(portion)
    if index is not None:
        meta["index"] = index
    if reply is not None:
        meta["reply"] = [list(reply.addresses), reply.token, reply.floor, reply.tx]
    return meta


class _Packer:
    """Packs a batch's structure with msgpack, collecting its arrays (depth-first) as references.

    `slots[k]`, when given, is the frame slot of the k-th array met (a permutation); else slot k.
    """

    def __init__(self, slots: list[int] | None = None) -> None:
        self.arrays: list[np.ndarray] = []
        self.slots = slots

    def default(self, obj: Any) -> Any:
        """msgpack's hook for everything that is not an exact plain type."""
        if isinstance(obj, (np.ndarray, np.generic)) and not isinstance(obj, (np.str_, np.bytes_)):
            self.arrays.append(np.asarray(obj))
            slot = len(self.arrays) - 1 if self.slots is None else self.slots[len(self.arrays) - 1]
            return msgpack.ExtType(EXT_ARRAY, slot.to_bytes(4, "big"))
        if isinstance(obj, tuple):
            return msgpack.ExtType(EXT_TUPLE, self.pack(list(obj)))
        for plain in (bool, int, float, str, bytes, list, dict):  # subclasses: np.str_, IntEnum, ...
            if isinstance(obj, plain):
                return plain(obj)
        raise EncodeError(
            f"cannot send a {type(obj).__module__}.{type(obj).__qualname__} in a batch: leaves must be "
            "numpy arrays or str, bytes, int, float, bool, None (in lists, tuples, dicts)")

    def pack(self, obj: Any) -> bytes:
        """msgpack bytes of obj; EncodeError for anything msgpack cannot carry."""
        try:
            return msgpack.packb(obj, default=self.default, strict_types=True, use_bin_type=True)
        except EncodeError:
            raise
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise EncodeError(f"cannot encode batch: {exc}") from exc


def _where_unsendable(obj: Any, path: str = "batch") -> str | None:
    """The path (`batch['image'][2]`) of the first leaf of `obj` that cannot be sent, or None when
    no single leaf is to blame. Only called once encoding has failed: no cost on the send path."""
    if isinstance(obj, dict):
        parts: Any = ((f"[{key!r}]", value) for key, value in obj.items())
    elif isinstance(obj, (list, tuple)):
        parts = ((f"[{index}]", value) for index, value in enumerate(obj))
    else:
        try:
            _Packer().pack(obj)
        except EncodeError:
            return path
        return None
    for suffix, value in parts:
        found = _where_unsendable(value, path + suffix)
        if found is not None:
            return found
    return None


def _encode_v1(batch: Any, infos: Sequence[str] | None) -> list:
    """Pure tensorcom 0.1 frames; EncodeError for anything but a list/tuple of arrays."""
    if not isinstance(batch, (list, tuple)):
        raise EncodeError(f"protocol 1 carries a list or tuple of arrays, not a {type(batch).__name__}; "
                          "use protocol 2")
    for index, item in enumerate(batch):
        if not isinstance(item, (np.ndarray, np.generic)) or isinstance(item, (np.str_, np.bytes_)):
            raise EncodeError(f"protocol 1 carries arrays only; element {index} is a "
                              f"{type(item).__name__}; use protocol 2")
    return tenbin.encode_list(batch, infos=infos)


def encode_batch(batch: Any, *, seq: int = 0, epoch: int = 0, sender: str = "", protocol: int = 2,
                 infos: Sequence[str] | None = None, portion: Portion | None = None,
                 reply: Reply | None = None, share: Portion | None = None, index: int | None = None) -> list:
    """A batch -> frames `[metadata, header_0, data_0, ...]` (protocol 2) or 0.1 frames (protocol 1).

    `batch` is a list, tuple or dict, nested freely, whose leaves are numpy arrays or plain values.
    Array data frames are memoryviews of the arrays (no copy), ordered by size, largest last (in
    depth-first order when `infos`, which labels the arrays in that order, is given). `portion`
    (stream, worker, workers) names the served portion the batch belongs to (`share=` is its
    deprecated spelling). Protocol 1 ignores seq/epoch/sender/portion/reply and keeps the list's
    order. `reply`: where receivers confirm it. `index`: the batch's 0-based position within its
    (epoch, portion) (tensorcom.serve sets it; EncodeError when it is not an int in 0..2**64-1).
    """
    if share is not None:
        portion = renamed_option(portion, share, "portion", "share", "encode_batch")
    if protocol == 1:
        return _encode_v1(batch, infos)
    if protocol != 2:
        raise ValueError(f"protocol must be 1 or 2, got {protocol!r}")
    _check_header(seq, epoch, sender, portion)
    if index is not None and (type(index) is not int or not 0 <= index < _UINT64):
        raise EncodeError(f"index must be an int in 0..2**64-1 (a batch's position in its portion), got {index!r}")
    if not isinstance(batch, (list, tuple, dict)):
        raise EncodeError(f"a batch is a list, tuple or dict, not a {type(batch).__name__}")
    packer = _Packer()
    meta = _with_portion({"v": VERSION, "kind": "batch", "seq": seq, "epoch": epoch, "sender": sender,
                          "batch": batch}, portion, reply, index)
    try:
        head = MAGIC + packer.pack(meta)
    except EncodeError as exc:
        try:
            where = _where_unsendable(batch)
        except RecursionError:  # nested too deep to walk: the message stays as msgpack gave it
            where = None
        if where is None:
            raise
        raise EncodeError(f"{where}: {exc}") from exc
    arrays = packer.arrays
    order = sorted(range(len(arrays)), key=lambda k: arrays[k].nbytes)  # stable: smallest first
    if infos is None and order != sorted(order):  # the largest data last: ZeroMQ moves it with less work
        slots = [0] * len(order)
        for slot, k in enumerate(order):
            slots[k] = slot
        head = MAGIC + _Packer(slots).pack(meta)  # a second C pack (~4 µs) beats a Python pre-walk
        arrays = [arrays[k] for k in order]
    return [head, *tenbin.encode_list(arrays, infos=infos)]


def encode_end_of_epoch(*, seq: int, epoch: int, sender: str = "", group: str | None = None,
                        group_size: int = 1, portion: Portion | None = None, reply: Reply | None = None,
                        share: Portion | None = None) -> list:
    """An end-of-epoch marker: one metadata frame saying that `sender` finished `epoch`.

    A sender that is one of `group_size` senders feeding the same receivers names its group, so a
    receiver knows how many markers end the epoch. `portion` (`share=`) and `reply` as for
    `encode_batch`.
    """
    if share is not None:
        portion = renamed_option(portion, share, "portion", "share", "encode_end_of_epoch")
    _check_header(seq, epoch, sender, portion)
    if group is not None and not isinstance(group, str):
        raise TypeError(f"group must be a str or None, not {group!r}")
    if not isinstance(group_size, int) or isinstance(group_size, bool) or not 1 <= group_size < _UINT64:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    meta = _with_portion({"v": VERSION, "kind": "end_of_epoch", "seq": seq, "epoch": epoch, "sender": sender,
                          "group": group, "group_size": group_size}, portion, reply)
    return [MAGIC + msgpack.packb(meta, use_bin_type=True)]


def encode_tick(*, seq: int, epoch: int, sender: str, reply: Reply) -> list:
    """A tick: one metadata frame that carries only `reply`. A sender whose last transmissions are
    unconfirmed sends one so that its receivers see a later transmission (docs/protocol.md 4.3);
    receivers confirm it and hand nothing to their caller."""
    _check_header(seq, epoch, sender)
    meta = _with_portion({"v": VERSION, "kind": "tick", "seq": seq, "epoch": epoch, "sender": sender}, None, reply)
    return [MAGIC + msgpack.packb(meta, use_bin_type=True)]


def peek_session(frames: Sequence[Any], limit: int = 1 << 16) -> tuple | None:
    """(sender, seq, kind, Reply) of a protocol-2 message that could not be decoded (too large, a bad
    array), read from its metadata frame alone when that frame is under `limit` bytes; None when it
    cannot be read. Lets a receiver confirm what it refused, so that it is not sent again."""
    views = _views(frames)
    if not views or views[0].nbytes > limit or views[0][:len(MAGIC)] != MAGIC:
        return None
    try:
        meta = msgpack.unpackb(views[0][len(MAGIC):], raw=False, strict_map_key=False,
                               ext_hook=lambda code, data: None)
        reply = meta["reply"]
        return (meta["sender"], int(meta["seq"]), meta["kind"],
                Reply(tuple(reply[0]), reply[1], int(reply[2]), int(reply[3])))
    except (ValueError, TypeError, KeyError, IndexError, msgpack.UnpackException):
        return None


def with_reply(frames: Sequence[Any], reply: Reply) -> list:
    """A protocol-2 message's frames with its `reply` replaced (a resend's new transmission number);
    the array frames are the same objects."""
    meta = msgpack.unpackb(memoryview(frames[0])[len(MAGIC):], raw=False, strict_map_key=False)
    return [MAGIC + msgpack.packb(_with_portion(meta, None, reply), use_bin_type=True), *frames[1:]]


# ---------------------------------------------------------------- single-buffer form


def frames_to_buffer(frames: Sequence[Any]) -> bytearray:
    """Frames -> one buffer in tenbin chunk framing (the single-part form of a message)."""
    return tenbin.encode_chunks(frames)


def buffer_to_frames(buf: Any) -> list[memoryview]:
    """One buffer -> the frames it holds, as memoryviews of it (no copy)."""
    return tenbin.decode_chunks(buf)


# ---------------------------------------------------------------- decoding


def _views(frames: Any) -> list[memoryview]:
    """Flat byte views of the frames (a bare buffer or zmq.Frame counts as one frame)."""
    if not isinstance(frames, (list, tuple)):
        frames = [frames]
    return [tenbin.byte_view(frame, index, "frame") for index, frame in enumerate(frames)]


def _decode_v2(views: list[memoryview], nbytes: int, max_plain_values: int) -> Message:
    """Message from v2 frames: metadata frame, then tenbin pairs."""
    arrays, infos = tenbin.decode_arrays(views[1:], first=1, unit="frame")
    meta = read_metadata(views[0][len(MAGIC):], arrays, max_plain_values)
    return Message(kind=meta.kind, batch=meta.batch, seq=meta.seq, epoch=meta.epoch, sender=meta.sender,
                   group=meta.group, group_size=meta.group_size, protocol=2, nbytes=nbytes, infos=tuple(infos),
                   portion=None if meta.portion is None else Portion(*meta.portion),
                   reply=None if meta.reply is None else Reply(*meta.reply), index=meta.index)


def _too_large(views: list[memoryview], nbytes: int, max_size: int) -> MessageTooLarge:
    """MessageTooLarge naming the first frame at which the running total of sizes passes `max_size`."""
    total = 0
    for index, view in enumerate(views):
        total += view.nbytes
        if total > max_size:
            break
    return MessageTooLarge(f"message of {nbytes} bytes exceeds the maximum of {max_size} bytes", index, "frame")


def decode_message(frames: Any, *, max_size: int | None = None, max_plain_values: int | None = None) -> Message:
    """Frames (multipart, or one frame holding the single-buffer form) -> Message, v1 or v2.

    Frames may be bytes, memoryviews, arrays or zmq.Frame objects; arrays in the result are views of
    them. The total size is checked against `max_size` before anything is decoded (MessageTooLarge,
    naming the frame that passes it). A v2 message's metadata may hold at most `max_plain_values`
    msgpack objects, checked before any is built; the default, `settings.max_plain_values()`, reads
    the environment on every call, so a receiver decoding a stream reads it once and passes it.
    Malformed input raises DecodeError naming the frame (docs/protocol.md 6).
    """
    if max_plain_values is not None and (type(max_plain_values) is not int or max_plain_values < 1):
        raise ValueError(f"max_plain_values must be a positive int, got {max_plain_values!r}")
    views = _views(frames)
    nbytes = sum(view.nbytes for view in views)
    if max_size is not None and nbytes > max_size:
        raise _too_large(views, nbytes, max_size)
    if not views:
        raise DecodeError("a message has at least one frame", None, "frame")
    if len(views) == 1 and views[0][:8] == tenbin.MAGIC:
        views = tenbin.decode_chunks(views[0])
    elif len(views) == 1 and nbytes == 0:
        views = []  # single-buffer form of an empty 0.1 batch
    if views and views[0][:len(MAGIC)] == MAGIC:
        limit = settings.max_plain_values() if max_plain_values is None else max_plain_values
        return _decode_v2(views, nbytes, limit)
    arrays, infos = tenbin.decode_arrays(views, unit="frame")
    return Message(kind="batch", batch=arrays, seq=None, epoch=None, sender=None, group=None,
                   group_size=1, protocol=1, nbytes=nbytes, infos=tuple(infos))
