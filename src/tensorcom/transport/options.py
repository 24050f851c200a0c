"""A `Connection`'s constructor options, grouped in small frozen dataclasses that check themselves.

    PassOptions(epoch, total, report, stats_horizon, batch_count)       what one pass over a stream is
    Encoding(protocol, multipart, infos, allow64, max_message_size,     how batches and markers are
             group, group_size, portion)                                written on the wire
    SocketOptions(timeout, sndhwm, rcvhwm, liveness, curve, topic,     what the sockets are given
                  senders, noexpand)
    Decoding(raw, device, batch_transforms, converters)                 what a receiver does with a batch
    SharingOptions(min_consumers, replay, policy, credit, batch_size,   the sharing schemes' options
                   observe, shm)

Each raises ValueError or TypeError, naming the option and the value given, when constructed with a
bad value; `Connection(...)` builds one of each from its arguments and hands them to its endpoint
(tensorcom.transport.ends). Values that have a default from the environment (`max_message_size`)
are resolved here, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensorcom import settings, wire
from tensorcom.transport.batches import listify, resolve_converters

DEFAULT_HWM = 10  # messages queued per peer; batches are large, so keep memory bounded


def check_int(name: str, value: Any, low: int) -> int:
    """`value` if it is an int >= low, else ValueError naming the option."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def check_seconds(name: str, value: Any) -> None:
    """ValueError unless `value` is None or a positive number of seconds."""
    if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")


@dataclass(frozen=True)
class PassOptions:
    """What one pass is: at most `epoch` batches (`len(conn)`), `total` samples over the connection's
    life when > 0, a statistics line every `report` samples when > 0, `stats_horizon` (0.1's message
    count for its recent rates: checked, otherwise unused; rates are over the window of
    tensorcom.rates), and samples counted by rows (`batch_count`) or one per batch."""

    epoch: int = 100000
    total: int = -1
    report: int = -1
    stats_horizon: int = 1000
    batch_count: bool = True

    def __post_init__(self) -> None:
        check_int("epoch", self.epoch, 1)


@dataclass(frozen=True)
class Encoding:
    """How a sender writes batches: `protocol` 1 (tenbin v1) or 2, `multipart` (False: one frame per
    message), `infos` (per-tensor labels), `allow64` (64-bit arrays permitted), `max_message_size`
    (bytes; None: settings.max_message_size(); receivers refuse bigger messages), `group` and
    `group_size` (carried by end-of-epoch markers), `portion` (a wire.Portion (stream, worker,
    workers) sent with every protocol-2 message, or None)."""

    protocol: int = 2
    multipart: bool = True
    infos: Any = None
    allow64: bool = False
    max_message_size: int | None = None
    group: str | None = None
    group_size: int = 1
    portion: wire.Portion | None = None

    def __post_init__(self) -> None:
        if self.protocol not in (1, 2):
            raise ValueError(f"protocol must be 1 or 2, got {self.protocol!r}")
        if self.group is not None and not isinstance(self.group, str):
            raise TypeError(f"group must be a str or None, got {self.group!r}")
        check_int("group_size", self.group_size, 1)
        limit = settings.max_message_size() if self.max_message_size is None else self.max_message_size
        object.__setattr__(self, "max_message_size", check_int("max_message_size", limit, 1))
        if self.portion is not None:
            object.__setattr__(self, "portion", wire.Portion(*self.portion))

    @property
    def timeout_hint(self) -> str:
        """What a receive timeout adds to its message when `max_message_size` is below the default
        (ZeroMQ drops a frame over the limit without telling the receiver); "" otherwise."""
        if self.max_message_size >= settings.DEFAULT_MAX_MESSAGE_SIZE:
            return ""
        return (f" (a message with a frame over max_message_size={self.max_message_size} bytes is "
                "refused by ZeroMQ, which closes its connection: it never arrives)")


@dataclass(frozen=True)
class SocketOptions:
    """What the sockets get: `timeout` (seconds; recv raises RecvTimeout, send TransportError; None
    waits), `sndhwm` / `rcvhwm` (high-water marks, messages), `liveness` (seconds a silent peer counts
    as alive, None: off; on the plain schemes a receiver raises PeerLost by the rules of
    tensorcom.transport.liveness), `curve` (a tensorcom.transport.security.Curve securing every
    socket with ZeroMQ CURVE; None: the $TENSORCOM_CURVE_* variables, none when unset), `topic` (SUB
    subscription, as 0.1's connect(url, topic)), `senders` (groups expected when binding), `noexpand`
    (no brace expansion of URLs)."""

    timeout: float | None = None
    sndhwm: int = DEFAULT_HWM
    rcvhwm: int = DEFAULT_HWM
    liveness: float | None = 10.0
    curve: Any = None
    topic: str = ""
    senders: int = 1
    noexpand: bool = False

    def __post_init__(self) -> None:
        check_seconds("timeout", self.timeout)
        check_seconds("liveness", self.liveness)
        check_int("sndhwm", self.sndhwm, 0)
        check_int("rcvhwm", self.rcvhwm, 0)
        check_int("senders", self.senders, 1)


@dataclass(frozen=True)
class Decoding:
    """What a receiver does with a batch: `raw` (hand the undecoded frames over), `batch_transforms`
    and `converters` (functions per field, tensorcom 0.1's rules; converters may be "torch",
    "torch_cuda", "numpy"; kept resolved), `device` (None: numpy; else a torch device to convert to)."""

    raw: bool = False
    device: str | None = None
    batch_transforms: Any = None
    converters: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch_transforms", listify(self.batch_transforms))
        object.__setattr__(self, "converters", resolve_converters(self.converters, self.device))


SERVER_OPTIONS = ("min_consumers", "replay", "policy", "shm")  # what a zshare/zsplit server takes
CONSUMER_OPTIONS = ("credit", "batch_size", "observe", "shm")  # what a zjoin consumer takes


@dataclass(frozen=True)
class SharingOptions:
    """The sharing schemes' options (docs/transport.md, "One pipeline, many jobs"). A zshare/zsplit
    server's `min_consumers` (wait for that many before the first batch), `replay` (batches kept for
    slow and late consumers), `policy` ("pace" or "detach"); a zjoin consumer's `credit` (batches
    prefetched), `batch_size` (rebatch to this many samples), `observe` (status reports only); `shm`
    for both (None: on this host unless $TENSORCOM_SHM=0, True: ask, False: never) hands batches over
    in shared memory. None leaves the server's or joiner's default; they check the values. `given`:
    the options given (not None), by name."""

    min_consumers: int = 1
    replay: int | None = None
    policy: str | None = None
    credit: int | None = None
    batch_size: int | None = None
    observe: bool = False
    shm: bool | None = None
    given: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = SERVER_OPTIONS + CONSUMER_OPTIONS
        object.__setattr__(self, "given", {name: getattr(self, name) for name in dict.fromkeys(names)
                                           if getattr(self, name) is not None})

    def server(self) -> dict:
        """Keyword arguments for a ShareServer (only those given)."""
        return {name: self.given[name] for name in SERVER_OPTIONS if name in self.given}

    def consumer(self) -> dict:
        """Keyword arguments for a Joiner (only those given)."""
        return {name: self.given[name] for name in CONSUMER_OPTIONS if name in self.given}
