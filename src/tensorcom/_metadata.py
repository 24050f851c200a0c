"""Reading the metadata of a protocol v2 message: frame 0's msgpack map -> checked header and batch.

`read_metadata(payload, arrays, max_plain_values)` takes frame 0 without its MAGIC and the arrays of
the message's tenbin pairs; it returns a `Metadata` (header fields as Python values, the batch with
array references resolved and tuples rebuilt). Every refusal is a DecodeError naming frame 0. The
rules are those of docs/protocol.md 4.2-4.4 and 6:

- at most `max_plain_values` msgpack objects (every nil, bool, number, str, bin, array, map and ext
  counts one; map keys count; the objects inside a tuple's payload count too). A payload of n bytes
  holds at most n objects, so only a payload longer than the budget is counted first, by a walk over
  its msgpack heads that builds no object (`count_objects`): a refused message costs no memory;
- ext types 1 (array reference, exactly 4 payload bytes) and 2 (tuple) only, in any ext form;
  msgpack's own timestamp (ext -1), which the msgpack library would decode by itself, is refused;
- integer fields are msgpack ints, or floats with an integral value below 2**53 (what JavaScript
  encoders emit for large numbers), never bools; string fields are msgpack str; the metadata map
  names each key once;
- a batch is a list, tuple or map that references every array exactly once; a marker has no batch
  and no arrays.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import msgpack

from .errors import DecodeError

VERSION = 2
KINDS = ("batch", "end_of_epoch", "tick")
EXT_ARRAY = 1  # msgpack ext type: 4-byte big-endian index of an array among the tenbin pairs
EXT_TUPLE = 2  # msgpack ext type: payload is the msgpack array of the tuple's items
MAX_DEPTH = 64  # nesting limit for tuples inside tuples when decoding
SAFE_FLOAT_INTEGERS = 1 << 53  # integral floats below this stand for the integer they equal
_REQUIRED = frozenset(("v", "kind", "seq", "epoch", "sender"))

# Every encoding of a msgpack timestamp (ext -1 with 4, 8 or 12 payload bytes) has its type byte 0xff
# right after one of these heads; where none occurs, the unpacker cannot meet one and the payload need
# not be walked. (The pattern starts with a literal byte, so the regex engine looks for it fast.)
_TIMESTAMP = re.compile(rb"\xff(?:(?<=[\xd6\xd7]\xff)|(?<=\xc7[\x04\x08\x0c]\xff)"
                        rb"|(?<=\xc8\x00[\x04\x08\x0c]\xff)|(?<=\xc9\x00\x00\x00[\x04\x08\x0c]\xff))")

# The walk of count_objects, by head byte. _SIZES: the whole size of the objects whose head tells it
# (one-byte objects, numbers, fixstr) and of the heads of array 16/32 and map 16/32, whose items follow
# as objects of their own; 0 for str, bin and ext forms, which carry their length.
_SIZES = [0] * 256
for _head in [*range(0x00, 0xA1), 0xC0, 0xC2, 0xC3, *range(0xE0, 0x100)]:  # fixint, fixmap, fixarray, nil, ...
    _SIZES[_head] = 1
for _head in range(0xA1, 0xC0):  # fixstr
    _SIZES[_head] = 1 + _head - 0xA0
for _heads, _size in (((0xCC, 0xD0), 2), ((0xCD, 0xD1, 0xDC, 0xDE), 3), ((0xCA, 0xCE, 0xD2, 0xDD, 0xDF), 5),
                      ((0xCB, 0xCF, 0xD3), 9)):
    for _head in _heads:
        _SIZES[_head] = _size
# a run of one-byte objects (the densest msgpack: 16 MiB of them decode to over 1 GiB) is counted in C
_ONE_BYTE = re.compile(rb"[\x00-\xa0\xc0\xc2\xc3\xe0-\xff]+")
_SIZED = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}  # bin and str 8/16/32: width of the length
_EXTS = {0xC7: 1, 0xC8: 2, 0xC9: 4}  # ext 8/16/32: width of the length (the type byte follows it)
_FIXEXTS = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}  # fixext: payload size
_MAP_WIDTHS = {0xDE: 2, 0xDF: 4}  # map 16 and map 32: width of the entry count


class Metadata(NamedTuple):
    """The checked fields of a metadata map (integers as ints, the portion as a triple or None)."""

    kind: str
    batch: Any
    seq: int
    epoch: int
    sender: str
    group: str | None
    group_size: int
    portion: tuple[str, int, int] | None  # the `share` key
    reply: tuple | None = None
    index: int | None = None  # a served batch's position within (epoch, portion)


def _error(message: str) -> DecodeError:
    """A DecodeError naming frame 0, the metadata frame."""
    return DecodeError(message, 0, "frame")


def _unknown_ext(code: int) -> DecodeError:
    return _error(f"unknown msgpack ext type {code} (only 1, an array reference, and 2, a tuple)")


def _after_ext(data: Any, code_at: int, size: int) -> int:
    """Where the walk goes on after an ext whose type byte is at `code_at`, its `size`-byte payload
    next: into a tuple's payload (its objects count), past an array reference; DecodeError (frame 0)
    for any other type, msgpack's timestamp (-1) included."""
    code = data[code_at] - (256 if data[code_at] > 127 else 0)
    if code == EXT_TUPLE:
        return code_at + 1
    if code != EXT_ARRAY:
        raise _unknown_ext(code)
    return code_at + 1 + size


def _after(data: Any, pos: int, head: int) -> int | None:
    """Where the walk goes on after the object at `pos` whose size its head does not tell (str, bin
    and ext forms); None where the bytes end first or the head is 0xc1 (never used)."""
    if head in _FIXEXTS:
        return _after_ext(data, pos + 1, _FIXEXTS[head]) if pos + 1 < len(data) else None
    width = _SIZED.get(head) or _EXTS.get(head)
    if width is None or pos + 1 + width + (head in _EXTS) > len(data):
        return None
    size = data[pos + 1] if width == 1 else int.from_bytes(data[pos + 1:pos + 1 + width], "big")
    return pos + 1 + width + size if head in _SIZED else _after_ext(data, pos + 1 + width, size)


def count_objects(data: Any, limit: int) -> int:
    """The number of msgpack objects in `data`, those inside tuple (ext 2) payloads included, or
    `limit + 1` when there are more than `limit`. Builds no object: a linear walk over the heads.

    For one well-formed msgpack object this is its number of objects; trailing bytes count too and
    truncated or malformed bytes end the walk (the unpacker that follows refuses both). An ext type
    other than 1 and 2 raises DecodeError (frame 0).
    """
    end, pos, count = len(data), 0, 0
    while pos < end and count <= limit:
        head = data[pos]
        if _SIZES[head] == 1:  # a run of one-byte objects
            stop = _ONE_BYTE.match(data, pos, min(end, pos + limit - count + 1)).end()
            count, pos = count + stop - pos, stop
            continue
        count, size = count + 1, _SIZES[head]
        if not size and (head == 0xC4 or head == 0xD9) and pos + 1 < end:  # bin 8, str 8: the most common
            size = 2 + data[pos + 1]
        if size:
            pos += size
            continue
        after = _after(data, pos, head)
        if after is None:
            break
        pos = after
    return min(count, limit + 1)


class _ExtHook:
    """msgpack ext hook resolving array references and tuples; raises DecodeError on bad ones.

    A class rather than a closure: a closure that passes itself to `_unpack` would form a reference
    cycle keeping every decoded message's frames alive until the cyclic garbage collector runs.
    """

    def __init__(self, arrays: list, used: list[int], limit: int):
        self.arrays, self.used, self.limit, self.depth = arrays, used, limit, 0

    def __call__(self, code: int, data: bytes) -> Any:
        if code == EXT_ARRAY:
            if len(data) != 4:
                raise _error(f"array reference (ext 1) with a payload of {len(data)} bytes: it must be 4 bytes")
            index = int.from_bytes(data, "big")
            if index >= len(self.arrays):
                raise _error(f"array reference {index} but the message has {len(self.arrays)} arrays")
            self.used[index] += 1
            return self.arrays[index]
        if code == EXT_TUPLE:
            if self.depth >= MAX_DEPTH:
                raise _error(f"tuples nested deeper than {MAX_DEPTH}")
            self.depth += 1
            try:
                items = _unpack(data, self)
            finally:
                self.depth -= 1
            if not isinstance(items, list):
                raise _error(f"tuple payload is a {type(items).__name__}, not an array")
            return tuple(items)
        raise _unknown_ext(code)


def _unpack(data: Any, hook: _ExtHook) -> Any:
    """msgpack.unpackb with our hook and msgpack's own length limits; DecodeError (frame 0) for
    anything msgpack rejects."""
    longest = min(hook.limit, len(data))  # no container declares more items than the budget or the bytes
    try:
        return msgpack.unpackb(data, ext_hook=hook, raw=False, strict_map_key=False, use_list=True,
                               max_array_len=longest, max_map_len=longest)
    except DecodeError:
        raise
    except Exception as exc:  # msgpack raises ValueError, TypeError, ExtraData, StackError, ...
        raise _error(f"bad msgpack metadata: {type(exc).__name__}: {exc}") from None


def _integer(value: Any, name: str, minimum: int) -> int:
    """`value` as an int >= minimum: a msgpack int, or a float with an integral value below 2**53."""
    if type(value) is int and value >= minimum:  # msgpack gives exact ints; bool is refused
        return value
    if type(value) is float and value.is_integer() and minimum <= value < SAFE_FLOAT_INTEGERS:
        return int(value)
    raise _error(f"metadata {name}={value!r} is not an integer >= {minimum} (a msgpack int, or a float "
                 f"with an integral value below 2**53)")


def _optional_integer(value: Any, name: str) -> int | None:
    """`value` as an int >= 0 (as `_integer`), or None when absent/nil."""
    return None if value is None else _integer(value, name, 0)


def _declared_entries(payload: Any) -> int | None:
    """The number of entries the map at the start of `payload` declares; None when it is no map."""
    head = payload[0] if len(payload) else None
    if head is not None and 0x80 <= head <= 0x8F:
        return head & 0x0F
    width = _MAP_WIDTHS.get(head)  # type: ignore[arg-type]
    return None if width is None else int.from_bytes(payload[1:1 + width], "big")


def _portion(value: Any) -> tuple[str, int, int] | None:
    """The `share` field (the sender's portion) as (stream, worker, workers), or None when absent/nil."""
    if value is None:
        return None
    if type(value) is not list or len(value) != 3 or type(value[0]) is not str:
        raise _error(f"metadata share={value!r} is not [stream, worker, workers]")
    worker, workers = _integer(value[1], "share worker", 0), _integer(value[2], "share workers", 1)
    if worker >= workers:
        raise _error(f"metadata share={value!r} is not [stream, worker, workers] with worker < workers")
    return value[0], worker, workers


def _reply(value: Any) -> tuple | None:
    """The `reply` field as (addresses, token, floor, tx), or None when absent/nil (protocol.md 4.3)."""
    if value is None:
        return None
    if (type(value) is not list or len(value) != 4 or type(value[0]) is not list or type(value[1]) is not str
            or not all(type(a) is str for a in value[0])):
        raise _error(f"metadata reply={value!r} is not [addresses, token, floor, tx]")
    return tuple(value[0]), value[1], _integer(value[2], "reply floor", 0), _integer(value[3], "reply tx", 0)


def _check(meta: Any, payload: Any) -> Metadata:
    """The checked fields of an unpacked metadata map (docs/protocol.md 4.2); DecodeError otherwise."""
    if type(meta) is not dict:
        raise _error(f"metadata is a {type(meta).__name__}, not a map")
    if _declared_entries(payload) != len(meta):
        raise _error(f"metadata map repeats a key ({_declared_entries(payload)} entries, {len(meta)} keys)")
    if not _REQUIRED <= meta.keys():
        raise _error(f"metadata lacks {sorted(_REQUIRED - meta.keys())}")
    if _integer(meta["v"], "v", 0) != VERSION:
        raise _error(f"unsupported protocol version {meta['v']!r}")
    if type(meta["kind"]) is not str or meta["kind"] not in KINDS:
        raise _error(f"unknown message kind {meta['kind']!r} (kinds: {', '.join(KINDS)})")
    group = meta.get("group")
    if type(meta["sender"]) is not str or not (group is None or type(group) is str):
        raise _error(f"metadata sender={meta['sender']!r} / group={group!r} must be str")
    return Metadata(meta["kind"], meta.get("batch"), _integer(meta["seq"], "seq", 0),  # positional: faster
                    _integer(meta["epoch"], "epoch", 0), meta["sender"], group,
                    _integer(meta.get("group_size", 1), "group_size", 1), _portion(meta.get("share")),
                    _reply(meta.get("reply")), _optional_integer(meta.get("index"), "index"))


def read_metadata(payload: Any, arrays: list, max_plain_values: int) -> Metadata:
    """The checked metadata of frame 0's bytes after MAGIC.

    `arrays` are the message's arrays in frame order; references resolve to them. DecodeError (frame
    0) for more than `max_plain_values` msgpack objects, malformed msgpack, or a map that breaks the
    rules of docs/protocol.md 4.2-4.4. Only a payload longer than the budget (or one where a msgpack
    timestamp may hide) is walked before unpacking: a shorter one cannot hold more objects.
    """
    walk = len(payload) > max_plain_values or _TIMESTAMP.search(payload) is not None
    if walk and count_objects(payload, max_plain_values) > max_plain_values:
        raise _error(f"metadata holds more than {max_plain_values} msgpack objects: the receiver's limit "
                     f"of plain values (max_plain_values, $TENSORCOM_MAX_PLAIN_VALUES)")
    used = [0] * len(arrays)
    meta = _check(_unpack(payload, _ExtHook(arrays, used, max_plain_values)), payload)
    if meta.kind == "batch" and not isinstance(meta.batch, (list, tuple, dict)):
        raise _error(f"batch is a {type(meta.batch).__name__}, not a list, tuple or dict")
    if meta.kind != "batch" and (meta.batch is not None or arrays):
        raise _error(f"a {meta.kind} message carries no batch")
    if used.count(1) != len(used):
        raise _error(f"arrays referenced {used} times instead of once each")
    return meta
