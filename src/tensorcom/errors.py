"""The tensorcom error tree: every error the library raises on purpose is one of these.

    TensorcomError
    ├── DecodeError (ValueError)          malformed tenbin / wire bytes; names the chunk or frame index
    │   └── MessageTooLarge               a message over the receiver's max_message_size (names the frame)
    ├── EncodeError (ValueError)          a batch that the chosen protocol cannot carry
    ├── URLError (ValueError)             a URL outside the grammar of docs (scheme, transport, host, port, topic)
    ├── CurveKeyError (ValueError)        a CURVE key file or directory that is missing or malformed; names it
    ├── TransportError (ConnectionError)  a ZeroMQ / socket failure, translated; names the URL
    │   ├── RecvTimeout (TimeoutError)    nothing arrived within `timeout`
    │   ├── PeerLost                      a peer stopped answering (missed heartbeats, died) or ended its stream
    │   ├── Detached                      a sharing server detached this consumer (it fell too far behind)
    │   └── Undelivered                   a closing sender could not deliver everything; says how much, to whom
    ├── ShardError (OSError)              reading or writing a shard; names the URL and member
    │   ├── OpenError                     the URL could not be opened (missing file, HTTP status, S3 denied, pipe exit)
    │   ├── TarFormatError                truncated archive, bad header checksum, corrupt gzip
    │   └── SampleError                   a bad sample: repeated extension, undecodable field
    ├── WorkerError (RuntimeError)        a pipeline worker raised; carries its traceback text and the sample key
    │   └── WorkerDied                    a worker process ended without saying why (signal, os._exit)
    └── MissingDependency (ImportError)   an optional dependency is not installed; names the extra to install

Catch `TensorcomError` for everything; the builtin bases let callers that only know
`ValueError` / `OSError` / `TimeoutError` keep working.
"""

from __future__ import annotations


class TensorcomError(Exception):
    """Base of every error tensorcom raises on purpose."""


class DecodeError(TensorcomError, ValueError):
    """Bytes that are not a valid tenbin / wire message.

    `index` is the chunk (tenbin) or frame (wire) where decoding failed, or None; `unit` names which.
    """

    def __init__(self, message: str, index: int | None = None, unit: str = "chunk"):
        super().__init__(message if index is None else f"{message} ({unit} {index})")
        self.index = index


class MessageTooLarge(DecodeError):
    """A received message larger than the receiver's `max_message_size`; `index` is the first frame at
    which the running total of frame sizes passes it (0 for a single-part message)."""


class EncodeError(TensorcomError, ValueError):
    """A batch that cannot be encoded with the requested protocol."""


class URLError(TensorcomError, ValueError):
    """A URL that does not follow tensorcom's grammar."""


class TransportError(TensorcomError, ConnectionError):
    """A socket-level failure, with the URL it happened on in `url`."""

    def __init__(self, message: str, url: str | None = None):
        super().__init__(message if url is None else f"{url}: {message}")
        self.url = url


class RecvTimeout(TransportError, TimeoutError):
    """Nothing was received within the connection's timeout."""


class PeerLost(TransportError):
    """A peer stopped sending heartbeats or closed unexpectedly."""


class Detached(TransportError):
    """A sharing server (zshare, policy "detach") stopped serving this consumer; the text says why."""


class Undelivered(TransportError):
    """A sender closed with batches its peers did not get: `counts` maps each peer (a consumer's name,
    or a description) to the number of batches."""

    def __init__(self, message: str, url: str | None = None, counts: dict | None = None):
        super().__init__(message, url)
        self.counts = dict(counts or {})


class CurveKeyError(TensorcomError, ValueError):
    """A CURVE key file or directory that is missing, unreadable or malformed; `path` names it."""

    def __init__(self, message: str, path: object = None):
        super().__init__(message if path is None else f"{path}: {message}")
        self.path = None if path is None else str(path)


class ShardError(TensorcomError, OSError):
    """A failure reading or writing a shard; `url` and `member` say where."""

    def __init__(self, message: str, url: str | None = None, member: str | None = None):
        where = ":".join(x for x in (url, member) if x)
        super().__init__(f"{where}: {message}" if where else message)
        self.url = url
        self.member = member

    def __str__(self) -> str:  # OSError would format its args as (errno, strerror)
        return self.args[0] if self.args else ""


class OpenError(ShardError):
    """The URL could not be opened or read."""


class TarFormatError(ShardError):
    """The bytes are not a well-formed (possibly gzipped) tar archive."""


class SampleError(ShardError):
    """A sample whose members or fields are invalid."""


class WorkerError(TensorcomError, RuntimeError):
    """A worker raised; `remote_traceback` holds its formatted traceback, `key` the sample key if known."""

    def __init__(self, message: str, remote_traceback: str = "", key: str | None = None):
        text = message if key is None else f"{message} (sample {key!r})"
        if remote_traceback:
            text = f"{text}\n--- worker traceback ---\n{remote_traceback}"
        super().__init__(text)
        self.remote_traceback = remote_traceback
        self.key = key


class WorkerDied(WorkerError):
    """A worker process ended without reporting an exception (killed by a signal, os._exit)."""


class MissingDependency(TensorcomError, ImportError):
    """An optional dependency that is not installed: `module` is its import name, `extra` the
    `tensorcom[extra]` that installs it."""

    def __init__(self, message: str, module: str, extra: str):
        super().__init__(message, name=module)
        self.module = module
        self.extra = extra
