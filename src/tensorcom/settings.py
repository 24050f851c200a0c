"""Every environment variable tensorcom reads, read here and nowhere else.

Each function returns the value in force now (read on every call, so tests can monkeypatch).
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MAX_MESSAGE_SIZE = 1 << 31  # 2 GiB: receivers refuse anything larger
DEFAULT_MAX_PLAIN_VALUES = 1_000_000  # msgpack objects in one message's metadata (about 100 MB decoded)


def _int_variable(name: str, default: int) -> int:
    """$name as an int, `default` when unset; ValueError naming the variable when it is not an int."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"${name} must be an integer, got {text!r}") from None


def cache_dir() -> Path:
    """Directory for cached data (the demo dataset): $TENSORCOM_CACHE, else $XDG_CACHE_HOME/tensorcom."""
    explicit = os.environ.get("TENSORCOM_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tensorcom"


def rank_and_world_size() -> tuple[int, int]:
    """(rank, world size) of this node from RANK / WORLD_SIZE; (0, 1) when unset."""
    rank, world = _int_variable("RANK", 0), _int_variable("WORLD_SIZE", 1)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK={rank} and WORLD_SIZE={world} do not describe a node of the job")
    return rank, world


def max_message_size() -> int:
    """Largest message a receiver accepts, in bytes: $TENSORCOM_MAX_MESSAGE_SIZE or 2 GiB."""
    return _int_variable("TENSORCOM_MAX_MESSAGE_SIZE", DEFAULT_MAX_MESSAGE_SIZE)


def max_plain_values() -> int:
    """Most msgpack objects (plain values, containers, map keys, array references) a receiver decodes
    from one message's metadata: $TENSORCOM_MAX_PLAIN_VALUES or 1,000,000; ValueError naming the
    variable when it is not a positive integer (docs/protocol.md 6)."""
    value = _int_variable("TENSORCOM_MAX_PLAIN_VALUES", DEFAULT_MAX_PLAIN_VALUES)
    if value < 1:
        raise ValueError(f"$TENSORCOM_MAX_PLAIN_VALUES must be a positive integer, got {value}")
    return value


def shared_memory() -> bool:
    """Whether sharing servers offer, and consumers on their host accept, the shared-memory handoff
    of batches (docs/sharing.md): False when $TENSORCOM_SHM is 0/false/no/off."""
    return os.environ.get("TENSORCOM_SHM", "").strip().lower() not in ("0", "false", "no", "off")


def timing() -> bool:
    """Whether tensorcom.serve's processes time their stages by default (tensorcom.pipeline.stage_times,
    two clock readings per stage per item): False when $TENSORCOM_TIMING is 0/false/no/off."""
    return os.environ.get("TENSORCOM_TIMING", "").strip().lower() not in ("0", "false", "no", "off")


def keras_backend() -> str | None:
    """The Keras backend the user chose by $KERAS_BACKEND (as set, even empty); None when unset."""
    return os.environ.get("KERAS_BACKEND")


def keras_home() -> Path:
    """Keras's configuration directory, where keras.json lies: $KERAS_HOME, else ~/.keras."""
    return Path(os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras"))


def s3_endpoint_url() -> str | None:
    """Endpoint of an S3-compatible store: $AWS_ENDPOINT_URL_S3, else $AWS_ENDPOINT_URL, else None (AWS)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def tar_accelerator() -> bool:
    """Whether the tar reader may use its C scanner (tensorcom.shards._ctarscan, when built): False when
    $TENSORCOM_PURE_PYTHON is 1/true/yes (then the pure-Python scanner reads the same way)."""
    return os.environ.get("TENSORCOM_PURE_PYTHON", "").strip().lower() not in ("1", "true", "yes")


def progress_interval() -> float:
    """Seconds between the plain progress lines of long commands when stderr is not a terminal:
    $TENSORCOM_PROGRESS_INTERVAL, else 10."""
    text = os.environ.get("TENSORCOM_PROGRESS_INTERVAL")
    if text is None:
        return 10.0
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"$TENSORCOM_PROGRESS_INTERVAL must be a number of seconds, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"$TENSORCOM_PROGRESS_INTERVAL must be positive, got {text!r}")
    return value


def _path_variable(name: str) -> Path | None:
    """$name as a Path (a leading ~ expanded), None when unset or empty."""
    text = os.environ.get(name, "").strip()
    return Path(text).expanduser() if text else None


def curve_secret() -> Path | None:
    """This side's CURVE key pair file (NAME.key_secret, from `tensorcom keys`): $TENSORCOM_CURVE_SECRET."""
    return _path_variable("TENSORCOM_CURVE_SECRET")


def curve_server() -> Path | None:
    """The CURVE public key file of the server a receiver accepts data from: $TENSORCOM_CURVE_SERVER."""
    return _path_variable("TENSORCOM_CURVE_SERVER")


def curve_clients() -> Path | None:
    """Directory of the public key files (*.key) of the only clients a CURVE server accepts:
    $TENSORCOM_CURVE_CLIENTS."""
    return _path_variable("TENSORCOM_CURVE_CLIENTS")
