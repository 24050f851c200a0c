"""Writing tar shards: TarWriter (one archive) and ShardWriter (a numbered series of archives).

Archives are deterministic: the members of a sample are written in sorted field order, with a fixed
mtime, owner and mode, and gzip'ed shards (.tgz / .tar.gz or compress=True) carry a zero gzip mtime,
so the same samples always give the same bytes: what Python's tarfile writes in stream mode, built by
tensorcom.shards._tarpack (headers joined from a prepared block, members handed over in large writes;
`size` counts the archive's bytes exactly). Destinations are anything gopen writes: paths,
pipe:CMD, `-`, and fsspec URLs (s3://...). Nothing partial appears under a shard's final name:

    path, file://PATH   written to a hidden `.NAME.tmp-PID-RANDOM` beside the target (no `out-*.tar`
                        glob or brace pattern matches it), then flushed, fsync'ed and renamed onto NAME
                        (os.replace) when the archive is finished. A process killed outright may leave
                        the hidden file, never a partial NAME. Non-regular targets (/dev/null, FIFOs)
                        are written in place.
    s3://, gs://, ...   fsspec uploads complete at close; an abandoned one is discard()ed instead (s3fs
                        aborts its multipart upload; a small file was never sent). File systems that
                        write in place (memory://) have the partial object removed.
    pipe:CMD, -         no rename: the output completes as the command or stream does; an abandoned
                        one is closed where it stands (the command sees the end of its input) and the
                        error raised. A caller's file object is flushed, never closed.

A writer is abandoned by abort(), by an exception leaving its `with` block, or by a failed write or
close; it is then never completed, and the exception carries a note naming the shard and how many
samples it held (also the writer's `abandoned`). A ShardWriter keeps the shards it completed before.
close() after a failed write raises ShardError rather than pretend the shard was written.
"""

from __future__ import annotations

import gzip
import os
from typing import IO, Any, Callable

from tensorcom.errors import OpenError, ShardError
from tensorcom.progress import Progress
from tensorcom.shards._destinations import Destination, open_destination
from tensorcom.shards._tarpack import Headers, TarPack
from tensorcom.shards.fields import encode_field

_GZ_SUFFIXES = (".tgz", ".tar.gz", ".gz")


def _add_note(exc: BaseException, note: str | None) -> None:
    """exc.add_note(note) where Python has it (3.11+); nothing when note is None."""
    if note is not None and hasattr(exc, "add_note"):
        exc.add_note(note)


class _AbandonedOnError:
    """`with` support for writers: complete on a clean exit, abandon (abort()) when the block raised,
    noting on the exception which shard was abandoned. Subclasses say whether a shard is open."""

    def _open(self) -> bool:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        if exc is None:
            self.close()
        elif self._open():
            _add_note(exc, self.abort())


class TarWriter(_AbandonedOnError):
    """Write samples (dicts with "__key__" and fields) as members KEY.FIELD of one tar archive.

    `dest` is a URL/path (opened with open_destination, completed or abandoned by us) or a binary file
    object (flushed, left open). `str` values are written as UTF-8, bytes as they are, other values
    encoded by extension (tensorcom.shards.fields.encode_field; pickle only with allow_pickle=True). Fields whose
    names start with "_" are not written unless keep_meta=True ("__key__" never is). Use as a context
    manager: a normal exit completes the archive, an exception abandons it (see the module docstring).
    """

    def __init__(self, dest: str | os.PathLike | IO[bytes], *, compress: bool | None = None,
                 encode: bool = True, allow_pickle: bool = False, mtime: int = 0,
                 user: str = "bigdata", group: str = "bigdata", mode: int = 0o444,
                 keep_meta: bool = False, **open_options: Any):
        if isinstance(dest, (str, os.PathLike)):
            self.url = os.fspath(dest)
            self.dest = open_destination(self.url, **open_options)
        elif hasattr(dest, "write"):
            self.url = getattr(dest, "name", "<stream>")
            self.dest = Destination(self.url, dest, owned=False)
        else:
            raise TypeError(f"dest must be a path, URL or binary file object, not {type(dest).__name__}")
        if compress is None:
            compress = str(self.url).endswith(_GZ_SUFFIXES)
        try:
            self.gzip = gzip.GzipFile(filename="", fileobj=self.dest, mode="wb", mtime=0) if compress else None
            headers = Headers(mtime=mtime, user=user, group=group, mode=mode)
        except BaseException:
            self.dest.discard()  # a temporary file, upload or pipe opened above must not be left behind
            raise
        self.pack = TarPack(self.gzip or self.dest, headers)
        self.writing = True  # until completed or abandoned
        self.encode, self.allow_pickle, self.keep_meta = encode, allow_pickle, keep_meta
        self.count = 0
        self.abandoned: str | None = None  # the sentence naming the shard, once abandoned
        self.failure: BaseException | None = None  # the error of a write or close that broke it off

    def _open(self) -> bool:
        return self.writing

    @property
    def size(self) -> int:
        """Bytes of the archive so far (headers and padding included), before any compression."""
        return self.pack.size

    def write(self, sample: dict[str, Any]) -> int:
        """Append one sample; returns the number of content bytes written (headers excluded). A bad
        sample raises before anything is written; an error while writing it abandons the archive."""
        if not self.writing:
            state = "an abandoned" if self.abandoned else "a closed"
            raise ValueError(f"write to {state} TarWriter ({self.url})")
        key, fields = sample_fields(sample, encode=self.encode, allow_pickle=self.allow_pickle,
                                    keep_meta=self.keep_meta)
        try:
            total = self._add(key, fields)
        except BaseException as exn:
            raise self._break_off(exn)
        self.count += 1
        return total

    def _add(self, key: str, fields: list[tuple[str, bytes]]) -> int:
        """Write the members of one sample; OS errors become OpenError naming the member."""
        name = key
        try:
            for field, data in fields:
                name = f"{key}.{field}"
                self.pack.add(name, data)
        except ShardError:
            raise
        except OSError as exn:
            raise OpenError(f"write failed: {exn}", url=self.url, member=name) from exn
        return sum(len(data) for _, data in fields)

    def _break_off(self, exn: BaseException) -> BaseException:
        """Abandon the archive after `exn`; returns the error to raise (exn, or an OpenError naming the
        shard for a bare OS error), noted with what was abandoned and kept as `failure`."""
        error = exn
        if isinstance(exn, OSError) and not isinstance(exn, ShardError):
            error = OpenError(f"finishing the archive failed: {exn}", url=self.url)
            error.__cause__ = exn
        _add_note(error, self.abort())
        self.failure = error
        return error

    def abort(self) -> str | None:
        """Abandon the archive: it is never completed, and nothing appears under its URL where the kind
        of destination allows (see the module docstring). Returns the sentence naming the shard and its
        sample count (also `abandoned`), or None when the archive was completed. Idempotent."""
        if self.writing:
            self.writing = False
            self.pack.drop()
            self.dest.discard()
            what = "nothing was left under that name" if self.dest.atomic else "its stream was cut off where it stood"
            count = f"{self.count} sample" + "s" * (self.count != 1)
            self.abandoned = f"abandoned shard {self.url} holding {count}: {what}"
        return self.abandoned

    def close(self) -> None:
        """Finish the archive (end blocks, gzip trailer) and complete the destination; idempotent.
        A failure here abandons the archive; after a failed write or close it raises ShardError."""
        if not self.writing:
            _raise_if_failed(self.abandoned, self.failure)
            return
        try:
            self.pack.finish()
            if self.gzip is not None:
                self.gzip.close()
            self.dest.commit()
        except BaseException as exn:
            raise self._break_off(exn)
        self.writing = False


def sample_fields(sample: dict[str, Any], *, encode: bool = True, allow_pickle: bool = False,
                  keep_meta: bool = False) -> tuple[str, list[tuple[str, bytes]]]:
    """(key, [(field, bytes)] in sorted field order) of one sample, as TarWriter writes it (its class
    docstring says how values become bytes); TypeError / ValueError for a bad sample, key or field."""
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
        if name == "__key__" or (name.startswith("_") and not keep_meta):
            continue
        value = sample[name]
        if encode:
            data = encode_field(name, value, allow_pickle=allow_pickle)
        elif isinstance(value, (bytes, bytearray, memoryview, str)):
            data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        else:
            raise TypeError(f"field {name!r} of {key!r} is {type(value).__name__}, not bytes (encode=False)")
        fields.append((name, data))
    return key, fields


def _raise_if_failed(abandoned: str | None, failure: BaseException | None) -> None:
    """close() of a writer that a failed write or close abandoned: raise ShardError saying so."""
    if failure is not None:
        raise ShardError(f"close() after a failure ({failure}); {abandoned}") from failure


class ShardWriter(_AbandonedOnError):
    """Write samples into numbered shards `pattern % n` (e.g. "out-%06d.tar"), starting a new shard
    when the current one holds `maxcount` samples or `maxsize` bytes. `shards` lists the URLs written
    (a shard is opened on its first sample, so none is empty); `post(url)` runs after each is completed.
    An exception leaving the `with` block, abort(), or a failed write abandons the current shard (see
    the module docstring) and stops the writer; completed shards stay. `progress`: True shows samples
    and shards written on stderr (tensorcom.progress: a bar on a terminal, else periodic lines), or
    pass a Progress to count into; off by default. Other options go to TarWriter.
    """

    def __init__(self, pattern: str, maxcount: int = 100000, maxsize: float = 3e9, *,
                 start_shard: int = 0, post: Callable[[str], Any] | None = None,
                 verbose: bool = False, progress: bool | Progress = False, **writer_options: Any):
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
        self.stopped = False  # by abort() or an abandoned shard: no more writes
        self.abandoned: str | None = None
        self.failure: BaseException | None = None
        self.progress = Progress("ShardWriter") if progress is True else (progress or None)

    def _open(self) -> bool:
        return self.writer is not None

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
        if self.stopped:
            raise ValueError(f"write to a ShardWriter that was stopped ({self.abandoned or 'abort()'})")
        writer = self.writer
        if writer is None or writer.count >= self.maxcount or writer.size >= self.maxsize:
            writer = self._next_writer()
        try:
            size = writer.write(sample)
        except BaseException:
            if writer.abandoned is not None:
                self._lost(writer)
            raise
        self.total += 1
        if self.progress is not None:
            self.progress.update(1, shards=len(self.shards))
        return size

    def _lost(self, writer: TarWriter) -> None:
        """`writer`'s shard was abandoned: forget it, remember why, and stop."""
        if self.writer is writer:
            self.writer = None
        if writer.url in self.shards:
            self.shards.remove(writer.url)
        self.abandoned, self.failure, self.stopped = writer.abandoned, writer.failure, True

    def _finish(self) -> None:
        writer = self.writer
        if writer is not None:
            try:
                writer.close()
            except BaseException:
                self._lost(writer)
                raise
            self.writer = None
            if self.post is not None:
                self.post(writer.url)

    def abort(self) -> str | None:
        """Abandon the current shard (completed ones stay; `post` does not run for it) and stop the writer.
        Returns the sentence naming the shard and its sample count (also `abandoned`), or None."""
        self.stopped = True
        if self.progress is not None:
            self.progress.close()
        if self.writer is not None:
            self.writer.abort()
            self._lost(self.writer)
        return self.abandoned

    def close(self) -> None:
        """Complete the current shard (running `post`); idempotent. After a failed write it raises ShardError."""
        if self.progress is not None:
            self.progress.close()
        _raise_if_failed(self.abandoned, self.failure)
        self._finish()
