"""ZeroMQ CURVE security for every tensorcom scheme: key files, socket options, client restriction.

Roles: the side that sends batches (zpush, zrpush, zpub, zrpub, zshare, zsplit) is the CURVE *server*,
whether it binds or connects; the receiving side (zpull, zrpull, zsub, zrsub, zjoin) is the CURVE
*client*, pinned to the server's public key. A `Curve` names the key files of one socket.

    curve_from(secret, server, clients, serving=)   explicit paths, else $TENSORCOM_CURVE_* (settings)
    secure(sock, curve, serving=) -> Release        options on a fresh socket, before bind/connect
    warn_if_exposed(endpoint, curve)                once per process: a bind to all interfaces, no CURVE
    add_curve_arguments / curve_from_args           --curve-secret/--curve-server/--curve-clients
    create_key_pair(directory, name)                what `tensorcom keys` writes

Servers restricted to a directory of client keys share one ZAP authenticator per zmq Context, started
by the first and stopped by the last one's `Release`; a restricted server refuses every client (fails
closed) if none answers (tensorcom.transport._authenticator; `authenticator_users(context)` counts).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import zmq
from zmq.utils import z85

from tensorcom import settings
from tensorcom.errors import CurveKeyError
from tensorcom.transport._authenticator import ANY_CLIENT_DOMAIN, Release, admit, authenticator_users
from tensorcom.urls import Endpoint

__all__ = ["ANY_CLIENT_DOMAIN", "Curve", "EXPOSED_TEXT", "ExposedEndpointWarning", "KeyFiles", "PUBLIC_SUFFIX",
           "Release", "SECRET_SUFFIX", "add_curve_arguments", "authenticator_users", "binds_everywhere",
           "create_key_pair", "curve_from", "curve_from_args", "read_client_keys", "read_key_pair",
           "read_public_key", "secure", "warn_if_exposed"]

SECRET_SUFFIX, PUBLIC_SUFFIX = ".key_secret", ".key"


class ExposedEndpointWarning(UserWarning):
    """A socket bound to every network interface without CURVE (see `warn_if_exposed`)."""


@dataclasses.dataclass(frozen=True)
class Curve:
    """The CURVE key files of one socket (str or PathLike, kept as Path; files are read by `check`
    and `secure`). secret: this side's NAME.key_secret (required to serve); server: the server's public
    NAME.key (required to receive); clients: a directory of the *.key files of the only clients a
    server accepts (None: any client that knows the server's public key)."""

    secret: Path | None = None
    server: Path | None = None
    clients: Path | None = None

    def __post_init__(self) -> None:
        for name in ("secret", "server", "clients"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value).expanduser())
        if self.secret is None and self.server is None:
            raise ValueError("Curve needs secret= (to serve) or server= (to receive)")
        if self.clients is not None and self.secret is None:
            raise ValueError(f"Curve(clients={str(self.clients)!r}) restricts the clients of a server, "
                             "which needs its own key pair: secret=NAME.key_secret")

    def check(self, serving: bool | None = None) -> None:
        """Read every file named (CurveKeyError if one is missing, unreadable or malformed) and, for
        `serving` True/False, ValueError when the file that role needs is not named."""
        if serving is not None:
            _required(self, serving)
        if self.secret is not None:
            read_key_pair(self.secret)
        if self.server is not None:
            read_public_key(self.server)
        if self.clients is not None:
            read_client_keys(self.clients)


@dataclasses.dataclass(frozen=True)
class KeyFiles:
    """What `create_key_pair` wrote: the public key file, the secret (key pair) file, the public key (z85)."""

    public: Path
    secret: Path
    public_key: str


# ---- key files --------------------------------------------------------------------------------


def create_key_pair(directory: str | os.PathLike = ".", name: str = "tensorcom") -> KeyFiles:
    """Write a new key pair as ZeroMQ certificates: DIRECTORY/NAME.key (public) and NAME.key_secret
    (public and secret, mode 0600 from the start); DIRECTORY is made if missing. FileExistsError,
    before anything is written, if either file exists; ValueError for a NAME that is not a file name."""
    if not name or name in (".", "..") or "/" in name or os.sep in name or "\0" in name:
        raise ValueError(f"key name must be a plain file name, got {name!r}")
    directory = Path(directory).expanduser()
    public, secret = directory / f"{name}{PUBLIC_SUFFIX}", directory / f"{name}{SECRET_SUFFIX}"
    for path in (secret, public):
        if os.path.lexists(path):
            raise FileExistsError(f"{path} exists; not overwriting it (remove it or choose another --name)")
    directory.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".tensorcom-keys-", dir=directory)  # mode 0700: nobody else reads
    try:
        import zmq.auth  # (and logging) only where keys are made or read: every socket imports this module

        made_public, made_secret = zmq.auth.create_certificates(scratch, name)
        _copy_new(made_secret, secret, 0o600, exact=True)
        try:
            _copy_new(made_public, public, 0o644)
        except BaseException:
            secret.unlink()
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return KeyFiles(public, secret, read_public_key(public).decode("ascii"))


def _copy_new(source: str, target: Path, mode: int, exact: bool = False) -> None:
    """Copy file `source` to `target`, which must not exist yet (FileExistsError), created with `mode`
    less what the umask takes away (`exact`: `mode` itself)."""
    data = Path(source).read_bytes()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    if exact:
        os.fchmod(fd, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _read_certificate(path: str | os.PathLike, what: str) -> tuple[bytes, bytes | None]:
    """(public, secret or None) of a ZeroMQ certificate file; CurveKeyError naming the file otherwise."""
    path = Path(path)
    if not path.exists():
        raise CurveKeyError(f"CURVE {what} does not exist (make key files with `tensorcom keys`)", path)
    if not path.is_file():
        raise CurveKeyError(f"CURVE {what} is not a file", path)
    try:
        import zmq.auth

        public, secret = zmq.auth.load_certificate(path)
    except ValueError:
        raise CurveKeyError(f"not a ZeroMQ CURVE certificate (no public-key line); expected a {what} "
                            "written by `tensorcom keys`", path) from None
    except OSError as exc:
        raise CurveKeyError(f"cannot read CURVE {what}: {exc.strerror or exc}", path) from None
    _check_z85(public, path, "public-key")
    if secret is not None:
        _check_z85(secret, path, "secret-key")
    return public, secret


def _check_z85(key: bytes, path: Path, field: str) -> None:
    """CurveKeyError unless `key` is a 40-character z85 CURVE key."""
    if len(key) != 40 or any(char not in z85.Z85CHARS for char in key):
        raise CurveKeyError(f"malformed {field} (a CURVE key is 40 z85 characters, got {len(key)})", path)


def read_key_pair(path: str | os.PathLike) -> tuple[bytes, bytes]:
    """(public, secret) z85 keys from a NAME.key_secret file; CurveKeyError if missing, unreadable,
    malformed, without a secret key (a public .key file) or with keys that do not belong together."""
    public, secret = _read_certificate(path, "secret key file")
    if secret is None:
        raise CurveKeyError("holds no secret key: this side needs its NAME.key_secret file, not the "
                            "public NAME.key", path)
    if zmq.curve_public(secret) != public:
        raise CurveKeyError("its public-key does not belong to its secret-key", path)
    return public, secret


def read_public_key(path: str | os.PathLike) -> bytes:
    """The z85 public key of a key file (NAME.key, or a NAME.key_secret); CurveKeyError otherwise."""
    return _read_certificate(path, "public key file")[0]


def read_client_keys(directory: str | os.PathLike) -> frozenset[bytes]:
    """The z85 public keys of every *.key file in `directory`; CurveKeyError when it is missing, not
    a directory, holds no *.key file (no client could connect) or one of them is malformed."""
    directory = Path(directory)
    if not directory.is_dir():
        what = "does not exist" if not directory.exists() else "is not a directory"
        raise CurveKeyError(f"CURVE clients directory {what}", directory)
    files = sorted(directory.glob(f"*{PUBLIC_SUFFIX}"))
    if not files:
        raise CurveKeyError(f"no *{PUBLIC_SUFFIX} files in the CURVE clients directory: no client could "
                            "connect; copy each consumer's NAME.key there", directory)
    return frozenset(read_public_key(f) for f in files)


# ---- configuration: arguments and environment -------------------------------------------------


def curve_from(secret: Any = None, server: Any = None, clients: Any = None, *,
               serving: bool | None = None) -> Curve | None:
    """The Curve of explicit paths, each falling back to its environment variable (settings:
    $TENSORCOM_CURVE_SECRET, $TENSORCOM_CURVE_SERVER, $TENSORCOM_CURVE_CLIENTS); None when nothing is
    configured. `serving` True (a sender) ignores $TENSORCOM_CURVE_SERVER, False (a receiver) ignores
    $TENSORCOM_CURVE_CLIENTS; an explicit path of the other role is a ValueError. The files are read
    now: CurveKeyError for a bad one, ValueError when the role's key file is missing."""
    if serving is True and server is not None:
        raise ValueError("the server's public key (--curve-server) is for receivers; a sender uses its own "
                         "--curve-secret and optionally --curve-clients")
    if serving is False and clients is not None:
        raise ValueError("--curve-clients restricts who may connect to a sender; a receiver uses "
                         "--curve-server (and optionally its own --curve-secret)")
    secret = secret if secret is not None else settings.curve_secret()
    if server is None and serving is not True:
        server = settings.curve_server()
    if clients is None and serving is not False:
        clients = settings.curve_clients()
    if secret is None and server is None and clients is None:
        return None
    curve = Curve(secret, server, clients)
    curve.check(serving)
    return curve


def add_curve_arguments(parser: argparse.ArgumentParser, serving: bool | None = None) -> None:
    """--curve-secret FILE, and --curve-server FILE (unless `serving` is True) and --curve-clients DIR
    (unless `serving` is False), in their own help group; `curve_from_args` reads them back."""
    group = parser.add_argument_group("CURVE security (see docs/security.md)")
    group.add_argument("--curve-secret", metavar="FILE", default=None,
                       help="this side's key pair file NAME.key_secret from `tensorcom keys` (default "
                       "$TENSORCOM_CURVE_SECRET); a sender needs one to be secured")
    if serving is not True:
        group.add_argument("--curve-server", metavar="FILE", default=None,
                           help="the sender's public key file NAME.key: receive only from it, encrypted "
                           "(default $TENSORCOM_CURVE_SERVER)")
    if serving is not False:
        group.add_argument("--curve-clients", metavar="DIR", default=None,
                           help="accept only receivers whose NAME.key is in DIR (default "
                           "$TENSORCOM_CURVE_CLIENTS; without it any receiver that has the public key)")


def curve_from_args(args: argparse.Namespace, serving: bool | None) -> Curve | None:
    """`curve_from` of the options `add_curve_arguments` added (absent ones count as not given)."""
    return curve_from(getattr(args, "curve_secret", None), getattr(args, "curve_server", None),
                      getattr(args, "curve_clients", None), serving=serving)


def _required(curve: Curve, serving: bool) -> None:
    """ValueError when `curve` lacks the file its role needs."""
    if serving and curve.secret is None:
        raise ValueError("a CURVE sender needs its key pair: --curve-secret FILE or $TENSORCOM_CURVE_SECRET")
    if not serving and curve.server is None:
        raise ValueError("a CURVE receiver needs the sender's public key: --curve-server FILE or "
                         "$TENSORCOM_CURVE_SERVER")


# ---- sockets ----------------------------------------------------------------------------------


def secure(sock: zmq.Socket, curve: Curve | None, *, serving: bool) -> Release:
    """Set CURVE options on `sock` (fresh: before its first bind or connect, which copy them) as the
    server (`serving`: the side that sends batches) or the client; a restricted server also joins its
    context's authenticator. Reads the key files (CurveKeyError, ValueError as `Curve.check`). With
    `curve` None nothing is set. Returns the `Release` to call after `sock.close()`."""
    if curve is None:
        return Release()
    _required(curve, serving)
    if not serving:
        _secure_client(sock, curve)
        return Release()
    public, secret = read_key_pair(curve.secret)
    clients = None if curve.clients is None else read_client_keys(curve.clients)
    sock.curve_publickey, sock.curve_secretkey = public, secret
    sock.curve_server = True
    return admit(sock, clients)


def _secure_client(sock: zmq.Socket, curve: Curve) -> None:
    """CURVE client options: the server's key, and this side's key pair (ephemeral when not given)."""
    server = read_public_key(curve.server)
    public, secret = zmq.curve_keypair() if curve.secret is None else read_key_pair(curve.secret)
    sock.curve_serverkey = server
    sock.curve_publickey, sock.curve_secretkey = public, secret


# ---- the warning ------------------------------------------------------------------------------

_warned = False
_warn_lock = threading.Lock()

EXPOSED_TEXT = (
    "{url} accepts connections from every network interface without authentication or encryption: "
    "anyone who can reach this port can read the batches (or send their own). Secure it with CURVE: "
    "make keys with `tensorcom keys`, give the sender --curve-secret FILE ($TENSORCOM_CURVE_SECRET) and "
    "the receivers --curve-server FILE ($TENSORCOM_CURVE_SERVER), optionally --curve-clients DIR "
    "($TENSORCOM_CURVE_CLIENTS); or bind to 127.0.0.1. See docs/security.md."
)


def binds_everywhere(endpoint: Endpoint) -> bool:
    """True when `endpoint` binds a tcp port on every interface (host `*`, `0.0.0.0`, `::`, `[::]`)."""
    if not endpoint.bind or endpoint.transport != "tcp":
        return False
    host = endpoint.address.rsplit(":", 1)[0].strip("[]")
    if host == "*":
        return True
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False  # a host name


def warn_if_exposed(endpoint: Endpoint, curve: Curve | None, stacklevel: int = 2) -> bool:
    """Warn (ExposedEndpointWarning, once per process) when `endpoint` binds every interface with
    `curve` None; returns whether it warned now. `stacklevel` as warnings.warn's (2: our caller)."""
    global _warned
    if curve is not None or not binds_everywhere(endpoint):
        return False
    with _warn_lock:
        if _warned:
            return False
        _warned = True
    warnings.warn(EXPOSED_TEXT.format(url=endpoint.url), ExposedEndpointWarning, stacklevel=stacklevel)
    return True
