"""Where a shard's bytes go: a destination completed by commit() or dropped by discard().

    open_destination(url)   LocalDestination for paths (temporary file beside the target, renamed on
                            commit), FsspecDestination for s3:// and other fsspec URLs (discard()
                            aborts the upload), Destination for pipe:CMD and `-` (no rename possible)

See tensorcom.shards.writers for what each guarantees when a writer is abandoned.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from typing import IO, Any

from tensorcom.errors import OpenError
from tensorcom.shards._schemes import DEFAULT_BUFSIZE, SCHEMES, opener, scheme_of


class Destination:
    """The bytes of one output: write() until commit() completes it or discard() drops it as far as its
    kind allows (module docstring); after either, writes go nowhere (an abandoned archive's end blocks).
    This base is a plain stream (pipe:, -), closed both ways; owned=False (a caller's file object):
    flushed on commit, left alone on discard."""

    atomic = False  # does discard() leave nothing under the final name?

    def __init__(self, url: str, stream: IO[bytes], owned: bool = True):
        self.url, self.stream, self.owned = url, stream, owned

    def write(self, data: Any) -> int:
        return len(data) if self.stream is None else self.stream.write(data)

    def flush(self) -> None:
        if self.stream is not None:
            self.stream.flush()

    def commit(self) -> None:
        """Complete the output: close the stream (or flush one the caller owns); raises what that raises."""
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.close() if self.owned else stream.flush()

    def discard(self) -> None:
        """Drop the output as far as this kind allows; never raises (the caller holds the error that counts)."""
        stream, self.stream = self.stream, None
        if stream is not None and self.owned:
            with contextlib.suppress(Exception):
                stream.close()


class LocalDestination(Destination):
    """A local file written as `.NAME.tmp-PID-RANDOM` beside its target and renamed onto it by commit()."""

    atomic = True

    def __init__(self, url: str, path: str, bufsize: int = DEFAULT_BUFSIZE, **options: Any):
        if options:
            raise TypeError(f"options {sorted(options)} are not understood for {url!r}")
        self.final = os.path.realpath(path) if os.path.islink(path) else path
        directory, name = os.path.split(self.final)
        self.temp = os.path.join(directory, f".{name[:200]}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            stream = open(self.temp, "xb", buffering=bufsize)
        except OSError as exn:
            raise OpenError(exn.strerror or str(exn), url=url) from exn
        super().__init__(url, stream)

    def commit(self) -> None:
        """Flush, fsync and close the temporary file, then rename it onto the target (removed on failure)."""
        stream = self.stream
        if stream is None:
            return
        try:
            stream.flush()
            os.fsync(stream.fileno())
            stream.close()
            os.replace(self.temp, self.final)
        except BaseException:
            self.discard()
            raise
        self.stream = None
        _sync_directory(os.path.dirname(self.final))

    def discard(self) -> None:
        """Close and remove the temporary file."""
        super().discard()
        with contextlib.suppress(OSError):
            os.remove(self.temp)


def _sync_directory(directory: str) -> None:
    """fsync `directory` so that a rename in it outlives a crash; skipped where that is not supported."""
    with contextlib.suppress(OSError):
        fd = os.open(directory or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class FsspecDestination(Destination):
    """An fsspec file (s3://, gs://, memory://, ...): commit() closes it, which completes the upload."""

    atomic = True

    def discard(self) -> None:
        """Buffered files (s3fs, gcsfs): discard() (s3fs aborts the upload) and marked closed, lest __del__
        close() and so upload them. Others (memory://) wrote in place: closed, and the object removed."""
        stream, self.stream = self.stream, None
        if stream is None:
            return
        from fsspec.spec import AbstractBufferedFile

        with contextlib.suppress(Exception):
            if isinstance(stream, AbstractBufferedFile):
                try:
                    stream.discard()
                finally:
                    stream.closed = True
            else:
                stream.close()
                stream.fs.rm(stream.path)


def open_destination(url: str, **options: Any) -> Destination:
    """The Destination for writing `url` (see the module docstring); `options` as gopen takes them.

    Raises OpenError (naming the URL) when it cannot be opened, TypeError for unknown options.
    """
    scheme = scheme_of(url)
    if scheme == "file":
        path = url[len("file://"):] if url.startswith("file://") else url
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = stat.S_IFREG  # absent (or unreadable: opening the temporary file will say)
        if stat.S_ISDIR(mode):
            raise OpenError("is a directory", url=url)
        if stat.S_ISREG(mode):
            return LocalDestination(url, path, **options)
    stream = opener(url)(url, "wb", **options)
    return FsspecDestination(url, stream) if scheme not in SCHEMES else Destination(url, stream)
