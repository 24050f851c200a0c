"""A local cache of remote shards: the first read of a URL fills it, later reads come from the file.

    gopen(url, cache_dir=DIR)          how it is used (and `samples(urls, cache_dir=DIR)`, which passes
                                       it on): remote URLs only (http, s3, pipe:, ...); local files and
                                       stdin are read as they are
    open_cached(url, cache_dir, open_remote, bufsize)   the stream gopen returns
    cache_path(url, cache_dir)         where the entry of `url` lives: cache_dir/<digest>-<base name>

The first reader streams: it gets the remote bytes as they arrive while they are also written to a
temporary file in `cache_dir`, which is renamed to the entry's name (atomic on one file system) only
when the remote stream has ended cleanly. So an entry is always whole: a download that breaks (an
OpenError, a body shorter than announced, a failed command) leaves no entry, and its temporary file
is removed. A reader that closes before the end (a tar reader stops at the end-of-archive blocks,
before the archive's padding) has the rest read on close when it is at most `DRAIN_LIMIT` bytes;
otherwise nothing is kept. Readers of one URL in several processes each download to their own
temporary file; the last rename wins, and every entry is whole. Nothing is ever evicted.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Callable
from typing import IO, Any

from tensorcom.errors import ShardError
from tensorcom.shards._destinations import LocalDestination
from tensorcom.shards._tarscan import read_into
from tensorcom.shards._schemes import DEFAULT_BUFSIZE, open_local

DRAIN_LIMIT = 1 << 20  # bytes a closing reader may leave unread and still complete the entry
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def cache_path(url: str, cache_dir: str | os.PathLike) -> str:
    """The entry file of `url`: a digest of the whole URL (no two URLs share an entry) and the last
    part of its path, made safe for a file name ("3f2a...-train-000001.tar")."""
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:20]
    base = url.split("://", 1)[-1].split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    base = _UNSAFE.sub("_", base)[-80:].lstrip(".") or "shard"
    return os.path.join(os.fspath(cache_dir), f"{digest}-{base}")


class CachingReader(io.RawIOBase):
    """The bytes of `source` (a remote stream, owned: closed with this reader), written on the side to a
    temporary file (a LocalDestination, as the writers use) that becomes `path` when `source` ends
    cleanly (see the module docstring)."""

    def __init__(self, source: IO[bytes], path: str):
        super().__init__()
        self.source = source
        self.entry: LocalDestination | None = LocalDestination(path, path)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        """Read into `buffer` (straight from the source where it has readinto, so no extra copy) and
        write the same bytes to the entry; the end of the source keeps the entry."""
        view = memoryview(buffer).cast("B")
        try:
            count = read_into(self.source, view)
        except BaseException:
            self._discard()
            raise
        if self.entry is not None:
            if count:
                self.entry.write(view[:count])
            elif len(view):
                self._keep()
        return count

    def _keep(self) -> None:
        """The download is whole: the temporary file becomes the entry."""
        entry, self.entry = self.entry, None
        entry.commit()

    def _discard(self) -> None:
        """No entry: the temporary file is removed (a no-op once kept or discarded)."""
        entry, self.entry = self.entry, None
        if entry is not None:
            entry.discard()

    def _drain(self) -> None:
        """Read the rest of `source` into the entry, at most DRAIN_LIMIT bytes; discard if more remain."""
        left = DRAIN_LIMIT
        while self.entry is not None and left >= 0:
            data = self.source.read(min(DEFAULT_BUFSIZE, left + 1))
            if not data:
                self._keep()
                return
            self.entry.write(data)
            left -= len(data)
        self._discard()

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self.entry is not None:
                self._drain()
        except (OSError, ShardError):  # the rest could not be read: no entry; the reader had its part
            self._discard()
        finally:
            try:
                self.source.close()
            finally:
                super().close()


def open_cached(url: str, cache_dir: str | os.PathLike, open_remote: Callable[[], IO[bytes]],
                bufsize: int = DEFAULT_BUFSIZE) -> IO[bytes]:
    """A binary stream of the bytes of `url`: its cache entry when there is one, else
    `open_remote()` read through a CachingReader that makes the entry. Creates `cache_dir`."""
    path = cache_path(url, cache_dir)
    if os.path.exists(path):
        return open_local(path, "rb", bufsize)
    os.makedirs(os.fspath(cache_dir), exist_ok=True)
    source = open_remote()
    try:
        return io.BufferedReader(CachingReader(source, path), bufsize)
    except BaseException:
        source.close()
        raise
