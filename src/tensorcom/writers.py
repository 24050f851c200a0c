"""Writing tar shards: TarWriter (one archive) and ShardWriter (a numbered series of archives).

Archives are deterministic: the members of a sample are written in sorted field order, with a fixed
mtime, owner and mode, and gzip'ed shards (.tgz / .tar.gz or compress=True) carry a zero gzip mtime,
so the same samples always give the same bytes. Destinations are anything gopen writes: paths,
pipe:CMD, `-`, and fsspec URLs (s3://...).
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from typing import IO, Any, Callable

from tensorcom.errors import OpenError, ShardError
from tensorcom.extcodec import encode_field
from tensorcom.gopen import gopen

_GZ_SUFFIXES = (".tgz", ".tar.gz", ".gz")


class TarWriter:
    """Write samples (dicts with "__key__" and fields) as members KEY.FIELD of one tar archive.

    `dest` is a URL/path (opened with gopen, closed by us) or a binary file object (left open).
    `str` values are written as UTF-8, bytes as they are, other values encoded by extension
    (extcodec.encode_field; pickle only with allow_pickle=True). Fields whose names start with "_"
    are not written unless keep_meta=True ("__key__" never is). Use as a context manager.
    """

    def __init__(self, dest: str | os.PathLike | IO[bytes], *, compress: bool | None = None,
                 encode: bool = True, allow_pickle: bool = False, mtime: int = 0,
                 user: str = "bigdata", group: str = "bigdata", mode: int = 0o444,
                 keep_meta: bool = False, **open_options: Any):
        if isinstance(dest, (str, os.PathLike)):
            self.url = os.fspath(dest)
            self.stream: IO[bytes] = gopen(self.url, "wb", **open_options)
            self.own_stream = True
        elif hasattr(dest, "write"):
            self.url, self.stream, self.own_stream = getattr(dest, "name", "<stream>"), dest, False
        else:
            raise TypeError(f"dest must be a path, URL or binary file object, not {type(dest).__name__}")
        if compress is None:
            compress = str(self.url).endswith(_GZ_SUFFIXES)
        try:
            self.gzip = gzip.GzipFile(filename="", fileobj=self.stream, mode="wb", mtime=0) if compress else None
            self.tar = tarfile.open(fileobj=self.gzip or self.stream, mode="w|", format=tarfile.PAX_FORMAT)
        except BaseException:
            if self.own_stream:  # a pipe: or fsspec stream opened above must not be left behind
                self.stream.close()
            raise
        self.encode, self.allow_pickle, self.keep_meta = encode, allow_pickle, keep_meta
        self.template = dict(mtime=int(mtime), uname=user, gname=group, mode=mode, uid=0, gid=0)
        self.count = 0
        self.size = 0

    def __enter__(self) -> "TarWriter":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _fields(self, sample: dict[str, Any]) -> tuple[str, list[tuple[str, bytes]]]:
        if not isinstance(sample, dict):
            raise TypeError(f"a sample must be a dict, not {type(sample).__name__}")
        key = sample.get("__key__")
        if not isinstance(key, str) or not key:
            raise ValueError(f"a sample needs a non-empty str '__key__', got {key!r}")
        if "." in key.rsplit("/", 1)[-1]:
            raise ValueError(f"'__key__' {key!r} has a dot in its last component: readers would split it")
        fields = []
        for name in sorted(sample):
            if not isinstance(name, str) or not name:
                raise ValueError(f"field names are non-empty str; sample {key!r} has {name!r}")
            if name == "__key__" or (name.startswith("_") and not self.keep_meta):
                continue
            value = sample[name]
            if self.encode:
                data = encode_field(name, value, allow_pickle=self.allow_pickle)
            elif isinstance(value, (bytes, bytearray, memoryview, str)):
                data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
            else:
                raise TypeError(f"field {name!r} of {key!r} is {type(value).__name__}, not bytes (encode=False)")
            fields.append((name, data))
        return key, fields

    def write(self, sample: dict[str, Any]) -> int:
        """Append one sample; returns the number of content bytes written (headers excluded)."""
        if self.tar is None:
            raise ValueError(f"write to a closed TarWriter ({self.url})")
        key, fields = self._fields(sample)
        total = 0
        for name, data in fields:
            info = tarfile.TarInfo(f"{key}.{name}")
            for attribute, value in self.template.items():
                setattr(info, attribute, value)
            info.size = len(data)
            try:
                self.tar.addfile(info, io.BytesIO(data))
            except ShardError:
                raise
            except OSError as exn:
                raise OpenError(f"write failed: {exn}", url=self.url, member=info.name) from exn
            total += len(data)
            self.size += 512 + len(data) + (-len(data) % 512)
        self.count += 1
        return total

    def close(self) -> None:
        """Finish the archive (end blocks, gzip trailer) and close what we opened; idempotent."""
        if self.tar is None:
            return
        tar, self.tar = self.tar, None
        try:
            tar.close()
            if self.gzip is not None:
                self.gzip.close()
        finally:
            if self.own_stream:
                self.stream.close()
            else:
                self.stream.flush()


class ShardWriter:
    """Write samples into numbered shards `pattern % n` (e.g. "out-%06d.tar"), starting a new shard
    when the current one holds `maxcount` samples or `maxsize` bytes. `shards` lists the URLs written
    (a shard is opened on its first sample, so none is empty); `post(url)` runs after each is closed.
    Other keyword arguments go to TarWriter.
    """

    def __init__(self, pattern: str, maxcount: int = 100000, maxsize: float = 3e9, *,
                 start_shard: int = 0, post: Callable[[str], Any] | None = None,
                 verbose: bool = False, **writer_options: Any):
        if not isinstance(pattern, str) or "%" not in pattern:
            raise ValueError(f"pattern needs a %-format for the shard number, like 'out-%06d.tar': {pattern!r}")
        try:
            pattern % 0
        except (TypeError, ValueError):
            raise ValueError(f"pattern must take one integer with %: {pattern!r}") from None
        if maxcount < 1 or maxsize < 1:
            raise ValueError(f"maxcount and maxsize must be positive, got {maxcount} and {maxsize}")
        self.pattern, self.maxcount, self.maxsize = pattern, int(maxcount), float(maxsize)
        self.next_shard, self.post, self.verbose = start_shard, post, verbose
        self.writer_options = writer_options
        self.writer: TarWriter | None = None
        self.shards: list[str] = []
        self.total = 0

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _next_writer(self) -> TarWriter:
        self._finish()
        url = self.pattern % self.next_shard
        self.next_shard += 1
        if self.verbose:
            print(f"# writing {url}", flush=True)
        self.writer = TarWriter(url, **self.writer_options)
        self.shards.append(url)
        return self.writer

    def write(self, sample: dict[str, Any]) -> int:
        """Append one sample to the current shard (starting a new one when full); returns its bytes."""
        writer = self.writer
        if writer is None or writer.count >= self.maxcount or writer.size >= self.maxsize:
            writer = self._next_writer()
        size = writer.write(sample)
        self.total += 1
        return size

    def _finish(self) -> None:
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.close()
            if self.post is not None:
                self.post(writer.url)

    def close(self) -> None:
        """Close the current shard (running `post`); idempotent."""
        self._finish()
