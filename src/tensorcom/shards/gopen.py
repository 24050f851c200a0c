"""Open any shard URL as a binary file object: `gopen(url, mode, **options)`, the one front door.

    path, file://PATH     local files (large buffered reads)
    http://, https://     streamed GET with a timeout, retries with backoff, resumed with Range requests
    pipe:CMD              a shell command's stdout (reading) or stdin (writing); a non-zero exit is an error
    -                     stdin (reading) or stdout (writing)
    s3://, gs://, ...     any other scheme goes through fsspec (s3fs for s3://); the S3 endpoint comes
                          from `endpoint_url=` or settings.s3_endpoint_url(), credentials from the usual
                          AWS settings or `key=` / `secret=` options

Each scheme's opener is in tensorcom.shards._schemes (the scheme table); `cache_dir=` reads a remote
URL through tensorcom.shards.cache, which opens through that table too, so neither imports this module.
Every failure to open or read is an `OpenError` naming the URL (and the command or HTTP status).
"""

from __future__ import annotations

import os
from typing import IO, Any

from tensorcom.shards._schemes import DEFAULT_BUFSIZE, opener, scheme_of
from tensorcom.shards.cache import open_cached

__all__ = ["gopen"]


def gopen(url: str | os.PathLike, mode: str = "rb", **options: Any) -> IO[bytes]:
    """Open `url` (see the module docstring) for binary reading ("rb") or writing ("wb").

    Options: `bufsize` for every scheme; `timeout`, `retries`, `backoff`, `headers` for HTTP;
    `timeout` for pipes; `cache_dir` to read a remote URL through a local cache (tensorcom.shards.cache);
    anything else goes to fsspec. Returns a binary file object; raises OpenError.
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str):
        raise TypeError(f"url must be a str or path, not {type(url).__name__}: {url!r}")
    if mode in ("r", "w", "a"):
        mode += "b"
    open_url = opener(url)
    cache_dir = options.pop("cache_dir", None)
    if cache_dir is not None and mode == "rb" and scheme_of(url) not in ("file", "-"):
        return open_cached(url, cache_dir, lambda: open_url(url, mode, **options),
                           options.get("bufsize", DEFAULT_BUFSIZE))
    return open_url(url, mode, **options)
