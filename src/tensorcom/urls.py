"""The URL grammar of tensorcom: `SCHEME[+TRANSPORT]://ADDRESS[#TOPIC]` ⇄ `Endpoint`. Pure: no sockets.

    zpush / zpull     PUSH / PULL     PUSH connects, PULL binds
    zrpush / zrpull   PUSH / PULL     reversed: PUSH binds, PULL connects
    zpub / zsub       PUB / SUB       PUB binds, SUB connects; `#topic` selects a topic
    zrpub / zrsub     PUB / SUB       reversed: PUB connects, SUB binds
    zshare / zsplit   sharing server  binds (every consumer gets every batch / each batch goes to one)
    zjoin             consumer        connects to a zshare or zsplit server

Transports: `tcp` (default; ADDRESS is HOST:PORT, PORT may be `*` when binding), `ipc` (ADDRESS is a
filesystem path: `zpush+ipc:///tmp/feed`), `inproc` (ADDRESS is a name, same process only).
Bash brace expansion (`zsub://127.0.0.1:788{0..3}`) turns one string into several URLs: `expand`.
Malformed URLs raise `errors.URLError` (a ValueError) naming the URL and listing the valid schemes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

import braceexpand

from tensorcom.errors import URLError

DEFAULT_SERVER_URL = "zpub://127.0.0.1:7880"  # where the servers send when given no URL (0.1's default)

# scheme -> (socket type name or None, binds?, kind); the socket type names are ZeroMQ's.
SCHEMES: dict[str, tuple[str | None, bool, str]] = {
    "zpush": ("PUSH", False, "send"),
    "zpull": ("PULL", True, "recv"),
    "zrpush": ("PUSH", True, "send"),
    "zrpull": ("PULL", False, "recv"),
    "zpub": ("PUB", True, "send"),
    "zsub": ("SUB", False, "recv"),
    "zrpub": ("PUB", False, "send"),
    "zrsub": ("SUB", True, "recv"),
    "zshare": (None, True, "send"),
    "zsplit": (None, True, "send"),
    "zjoin": (None, False, "recv"),
}
TRANSPORTS = ("tcp", "ipc", "inproc")
SHARING_SCHEMES = ("zshare", "zsplit", "zjoin")
IPC_PATH_MAX = 107  # sun_path holds 108 bytes including the terminating NUL

_URL = re.compile(r"^(?P<scheme>[A-Za-z0-9]+)(?:\+(?P<transport>[A-Za-z0-9]+))?://(?P<rest>.*)$", re.S)
_HOSTPORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]\s]+):(?P<port>\d+|\*)$")
_TOPIC = re.compile(r"^[\x21-\x7e]{1,255}$")


@dataclass(frozen=True)
class Endpoint:
    """One parsed URL.

    url: the URL as given; scheme: e.g. "zpull"; socket_type: ZeroMQ socket type name ("PUSH", "PULL",
    "PUB", "SUB") or None for the sharing schemes; bind: True when this side binds; transport: "tcp",
    "ipc" or "inproc"; address: HOST:PORT, path or name; topic: "" unless `#topic` was given.
    """

    url: str
    scheme: str
    socket_type: str | None
    bind: bool
    transport: str
    address: str
    topic: str = ""

    @property
    def zmq_address(self) -> str:
        """The address string ZeroMQ's bind/connect take, e.g. "tcp://127.0.0.1:7880"."""
        return f"{self.transport}://{self.address}"

    @property
    def sends(self) -> bool:
        """True for the sending side (push, pub, share, split), False for receivers."""
        return SCHEMES[self.scheme][2] == "send"

    @property
    def sharing(self) -> bool:
        """True for zshare / zsplit / zjoin (the flow-controlled sharing protocol)."""
        return self.scheme in SHARING_SCHEMES


def _bad(url: str, why: str) -> URLError:
    """A URLError naming `url`, saying `why`, and listing the grammar."""
    return URLError(
        f"bad URL {url!r}: {why}; expected SCHEME[+TRANSPORT]://ADDRESS[#TOPIC] with SCHEME one of "
        f"{', '.join(SCHEMES)} and TRANSPORT one of {', '.join(TRANSPORTS)}"
    )


def _check_address(url: str, transport: str, address: str, bind: bool) -> str:
    """Validate ADDRESS for `transport`; returns it normalised (a trailing "/" after HOST:PORT dropped)."""
    if transport == "tcp":
        address = address[:-1] if address.endswith("/") else address
        match = _HOSTPORT.match(address)
        if not match:
            raise _bad(url, f"tcp address {address!r} is not HOST:PORT")
        port = match.group("port")
        if port == "*" and not bind:
            raise _bad(url, "port '*' (any free port) only makes sense on the binding side")
        if port != "*" and not 1 <= int(port) <= 65535:
            raise _bad(url, f"port {port} is outside 1..65535")
    elif not address:
        raise _bad(url, f"missing {'path' if transport == 'ipc' else 'name'} after {transport}://")
    elif transport == "ipc" and len(address.encode()) > IPC_PATH_MAX:
        raise _bad(url, f"ipc path is longer than {IPC_PATH_MAX} bytes")
    return address


def parse(url: str) -> Endpoint:
    """Parse one URL (no brace expansion) into an `Endpoint`; raises URLError when malformed."""
    if not isinstance(url, str):
        raise TypeError(f"a URL must be a str, not {type(url).__name__}: {url!r}")
    match = _URL.match(url.strip())
    if not match:
        raise _bad(url, "no SCHEME:// prefix")
    scheme = match.group("scheme").lower()
    transport = (match.group("transport") or "tcp").lower()
    if scheme not in SCHEMES:
        raise _bad(url, f"unknown scheme {scheme!r}")
    if transport not in TRANSPORTS:
        raise _bad(url, f"unknown transport {transport!r}")
    rest, hash_, topic = match.group("rest").partition("#")
    socket_type, bind, _ = SCHEMES[scheme]
    if hash_:
        if socket_type not in ("PUB", "SUB"):
            raise _bad(url, f"a #topic only applies to publish/subscribe schemes, not {scheme}")
        if not _TOPIC.match(topic):
            raise _bad(url, f"topic {topic!r} must be 1-255 printable ASCII characters without spaces")
    address = _check_address(url, transport, rest, bind)
    return Endpoint(url, scheme, socket_type, bind, transport, address, topic)


def expand(urls: str | Iterable[str], noexpand: bool = False) -> list[str]:
    """One URL or a list of them → a flat list of URLs, each brace-expanded unless `noexpand`."""
    if isinstance(urls, str):
        urls = [urls]
    result: list[str] = []
    for url in urls:
        if not isinstance(url, str):
            raise TypeError(f"a URL must be a str, not {type(url).__name__}: {url!r}")
        try:
            result.extend([url] if noexpand else braceexpand.braceexpand(url))
        except Exception as exc:  # braceexpand raises its own errors on unbalanced braces
            raise _bad(url, f"brace expansion failed ({exc})") from None
    if not result:
        raise URLError("no URL given")
    return result


def parse_all(urls: str | Iterable[str], noexpand: bool = False) -> list[Endpoint]:
    """Brace-expand and parse one URL or several; returns one Endpoint per expanded URL."""
    return [parse(url) for url in expand(urls, noexpand)]
