"""Converting a dataset into shards, what is about the shards: the plan, the manifest, the inputs,
writing one run of shards, the resume rules (`tensorcom shard`; the processes that write the tasks in
parallel are the pipeline layer's, tensorcom.pipeline.shard_writing.convert).

    manifest, tasks = prepare(source, "out/train-%06d.tar", maxcount=1000, processes=2, resume=False)
    write_run(source, "out", "tar", tasks[i]) -> [(name, count)]    in any process, for each task

`source` is a ConvertInput: a count, a fingerprint, per-sample sizes and `read(start, stop)`, the
sample dicts {"__key__", field: value} of that slice (FilesInput for image folders and file lists,
IterableInput for any function yielding samples; tables and Hugging Face datasets in
tensorcom.shards.convert_tables). Values are written as TarWriter writes them (bytes as they are,
str as UTF-8, others encoded by extension; fields starting with "_" are not written).

1. Plan (pure, `plan_shards`): the input's count, `maxcount` and, with `maxsize`, its sizes → one
   (start, stop) slice per shard. Shard n holds samples start..stop-1 whatever the process count.
2. Manifest: `manifest_path(pattern)` (out/train.manifest.json) records the shards, their counts, the
   options and the input's fingerprint, written (atomically) before any shard.
3. Write: the shards not yet finished, grouped into contiguous runs (one shard per task for inputs that
   read any slice directly; N runs for sequential inputs); `write_run` writes one. Each shard goes to
   a hidden temporary file in its directory, is fsync'ed and renamed (tensorcom.shards._destinations):
   a shard's name exists once it is whole.
4. Resume: with `resume=True` an existing manifest must match (same fingerprint and options, else
   ValueError naming what changed); shards present with their planned sample count are kept as they
   are (not rewritten); leftover temporary files of the plan's shards are removed.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import itertools
import json
import os
import tarfile
from typing import Any, Callable, Iterable, Iterator

from tensorcom.errors import OpenError
from tensorcom.shards._destinations import open_destination
from tensorcom.shards.writers import TarWriter, sample_fields

FORMATS = ("tar", "parquet")
_MEMBER_OVERHEAD = 1024  # a header block and half a block of padding, per field: about 2 fields per sample


class ConvertInput:
    """What convert() reads. Subclasses give `__len__`, `fingerprint()` (a str that changes when the
    data does), `read(start, stop)` (sample dicts) and, for maxsize, `sizes()` (bytes per sample in a
    shard, estimated). `sequential`: reading from `start` costs reading everything before it. Instances
    are pickled into worker processes."""

    sequential = False
    description = "input"

    def __len__(self) -> int:
        raise NotImplementedError

    def fingerprint(self) -> str:
        raise NotImplementedError

    def sizes(self) -> list[int]:
        return [sample_size(s) for s in self.read(0, len(self))]

    def read(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        raise NotImplementedError


def sample_size(sample: dict[str, Any]) -> int:
    """Estimated bytes of `sample` in a tar shard: its bytes/str values plus a header per field."""
    size = 0
    for name, value in sample.items():
        if not name.startswith("_"):
            size += _MEMBER_OVERHEAD // 2 + (len(value) if isinstance(value, (bytes, str)) else 16)
    return size


class FilesInput(ConvertInput):
    """Files stored as their bytes: `files` [(path, label)] (an ImageFolder's `samples`) under `root`.
    Sample i is {"__key__": path under root without extension, EXT: file bytes, "cls": label as text}."""

    def __init__(self, files: Iterable[tuple[str, int]], root: str):
        self.files = [(os.fspath(path), int(label)) for path, label in files]
        self.root = os.fspath(root)
        self.prefix = os.path.join(self.root, "")
        self.description = f"files under {self.root}"
        self._stats: list[os.stat_result] | None = None

    def __len__(self) -> int:
        return len(self.files)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_stats": None}  # what workers need is the file list

    def _stat(self) -> list[os.stat_result]:
        if self._stats is None:
            try:
                self._stats = [os.stat(path) for path, _ in self.files]
            except OSError as exc:
                raise OpenError(f"cannot read: {exc.strerror or exc}", url=exc.filename) from exc
        return self._stats

    def fingerprint(self) -> str:
        lines = [f"{self._name(path)}\t{label}\t{st.st_size}\t{st.st_mtime_ns}\n"
                 for (path, label), st in zip(self.files, self._stat())]
        return hashlib.sha256("".join(lines).encode()).hexdigest()

    def _name(self, path: str) -> str:
        """`path` relative to the root."""
        return path[len(self.prefix):] if path.startswith(self.prefix) else os.path.relpath(path, self.root)

    def sizes(self) -> list[int]:
        return [st.st_size + _MEMBER_OVERHEAD for st in self._stat()]

    def read(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        for path, label in self.files[start:stop]:
            stem, ext = os.path.splitext(self._name(path))
            yield {"__key__": stem, ext[1:].lower() or "bin": read_file(path), "cls": b"%d" % label}


def read_file(path: str, chunk: int = 1 << 20) -> bytes:
    """The bytes of file `path` (os.read: no buffered file object per file); OpenError naming it."""
    try:
        return _read_file(path, chunk)
    except OSError as exc:
        raise OpenError(f"cannot read: {exc.strerror or exc}", url=path) from exc


def _read_file(path: str, chunk: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = [os.read(fd, chunk)]
        while len(parts[-1]) == chunk or (len(parts) > 1 and parts[-1]):
            parts.append(os.read(fd, chunk))
    finally:
        os.close(fd)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class IterableInput(ConvertInput):
    """The samples of `function()` (called anew for each pass; a picklable module-level function).
    Samples without "__key__" get their index, "%09d". Counting and fingerprinting read it once."""

    sequential = True

    def __init__(self, function: Callable[[], Iterable[dict[str, Any]]], name: str | None = None):
        self.function = function
        self.description = name or getattr(function, "__qualname__", repr(function))
        self._count: int | None = None
        self._digest = ""

    def _scan(self) -> None:
        if self._count is None:
            digest, count = hashlib.sha256(), 0
            for count, sample in enumerate(self.read(0, None), 1):
                digest.update(repr(sorted((k, sample_size({k: v})) for k, v in sample.items())).encode())
            self._count, self._digest = count, digest.hexdigest()

    def __len__(self) -> int:
        self._scan()
        return self._count or 0

    def fingerprint(self) -> str:
        self._scan()
        return self._digest

    def read(self, start: int, stop: int | None) -> Iterator[dict[str, Any]]:
        for index, sample in enumerate(itertools.islice(self.function(), start, stop), start):
            if not isinstance(sample, dict):
                raise TypeError(f"{self.description} gave a {type(sample).__name__} at {index}, not a sample dict")
            yield sample if "__key__" in sample else {"__key__": f"{index:09d}", **sample}


@dataclasses.dataclass(frozen=True)
class Shard:
    """One planned shard: its index, file name (the pattern's, no directory) and input slice."""

    index: int
    name: str
    start: int
    stop: int

    @property
    def count(self) -> int:
        return self.stop - self.start


def plan_shards(count: int, maxcount: int, sizes: list[int] | None = None, maxsize: float | None = None
                ) -> list[tuple[int, int]]:
    """Pure: the (start, stop) slices of `count` samples, at most `maxcount` per shard and, with
    `sizes` and `maxsize`, a new shard before the sample that would take it past `maxsize` bytes
    (a shard holds at least one sample)."""
    if maxcount < 1:
        raise ValueError(f"maxcount must be positive, got {maxcount}")
    if maxsize is None or sizes is None:
        return [(start, min(start + maxcount, count)) for start in range(0, count, maxcount)]
    slices, start, total = [], 0, 0
    for index, size in enumerate(sizes[:count]):
        if index > start and (index - start >= maxcount or total + size > maxsize):
            slices.append((start, index))
            start, total = index, 0
        total += size
    if start < count:
        slices.append((start, count))
    return slices


def manifest_path(pattern: str) -> str:
    """The manifest beside the shards of `pattern`: out/train-%06d.tar → out/train.manifest.json."""
    directory, name = os.path.split(pattern)
    stem = name.split("%", 1)[0].rstrip("-_.") or "shards"
    return os.path.join(directory, f"{stem}.manifest.json")


@dataclasses.dataclass
class Manifest:
    """What a conversion planned: options, the input's fingerprint, the shards (kept, written)."""

    pattern: str
    format: str
    maxcount: int
    maxsize: float | None
    input: str
    fingerprint: str
    shards: list[Shard]
    kept: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> str:
        shards = [{"name": s.name, "start": s.start, "count": s.count} for s in self.shards]
        fields = dict(pattern=self.pattern, format=self.format, maxcount=self.maxcount, maxsize=self.maxsize,
                      input=self.input, fingerprint=self.fingerprint, samples=sum(s.count for s in self.shards))
        return json.dumps({"version": 1, **fields, "shards": shards}, indent=1) + "\n"

    def mismatch(self, old: dict[str, Any]) -> str | None:
        """Why `old` (a manifest read back) cannot be resumed into this plan, or None."""
        if old.get("fingerprint") != self.fingerprint:
            return f"the input changed since the manifest was written ({old.get('input')!r} had fingerprint " \
                   f"{str(old.get('fingerprint'))[:12]}, {self.input!r} has {self.fingerprint[:12]})"
        for option in ("format", "maxcount", "maxsize"):
            if old.get(option) != getattr(self, option):
                return f"{option} was {old.get(option)!r}, now {getattr(self, option)!r}"
        return None


def _write_atomic(path: str, text: str) -> None:
    dest = open_destination(path)
    dest.write(text.encode())
    dest.commit()


def shard_count(path: str, format: str) -> int | None:
    """Samples in the finished shard at `path`, or None when it is absent or unreadable."""
    if not os.path.isfile(path):
        return None
    try:
        if format == "parquet":
            from tensorcom.shards._parquet import parquet_rows

            return parquet_rows(path)
        return tar_samples(path)
    except Exception:  # a damaged shard is rewritten
        return None


def write_tar_shard(path: str, samples: Iterable[dict[str, Any]]) -> int:
    """Write `samples` as one tar shard at `path` (TarWriter: atomically, abandoned on an error); how many."""
    with TarWriter(path) as writer:
        for sample in samples:
            writer.write(sample)
    return writer.count


def tar_samples(path: str) -> int | None:
    """Samples (runs of members with one key) of the tar file at `path`, from its headers only (the data
    is skipped); None when the file ends before its last member's data and the end-of-archive blocks."""
    keys, last = 0, None
    with tarfile.open(path, "r:") as archive:
        for member in archive:
            directory, _, name = member.name.rpartition("/")
            key = (directory, name.split(".", 1)[0])
            keys, last = keys + (key != last), key
        end = archive.offset
    return keys if os.path.getsize(path) >= end + 2 * tarfile.BLOCKSIZE else None


def write_run(source: ConvertInput, directory: str, format: str, run: list[Shard]) -> list[tuple[str, int]]:
    """Write the shards of `run` (in input order) into `directory` as `format` from one read of their
    slice of `source`; [(name, count)]. ValueError when the input gives another count than planned."""
    samples = source.read(run[0].start, run[-1].stop)
    position, done = run[0].start, []
    for shard in run:
        for _ in itertools.islice(samples, shard.start - position):
            pass
        part = itertools.islice(samples, shard.count)
        path = os.path.join(directory, shard.name)
        if format == "parquet":
            from tensorcom.shards._parquet import write_parquet_shard

            count = write_parquet_shard(path, (sample_fields(s) for s in part))
        else:
            count = write_tar_shard(path, part)
        if count != shard.count:
            raise ValueError(f"{source.description} gave {count} samples for {shard.name}, planned {shard.count} "
                             "(did the input change while it was read?)")
        position = shard.stop
        done.append((shard.name, count))
    return done


def runs(shards: list[Shard], processes: int, sequential: bool) -> list[list[Shard]]:
    """Pure: the tasks for `shards` — one shard each, or for a sequential input `processes` contiguous
    runs of about equal sample counts."""
    if not sequential or not shards:
        return [[s] for s in shards]
    total, groups, current, acc = sum(s.count for s in shards), [], [], 0
    for shard in shards:
        current.append(shard)
        acc += shard.count
        if acc * processes >= total * (len(groups) + 1) and len(groups) < processes - 1:
            groups.append(current)
            current = []
    return groups + ([current] if current else [])


def _clear_leftovers(directory: str, shards: list[Shard]) -> None:
    for shard in shards:
        for leftover in glob.glob(os.path.join(glob.escape(directory), f".{glob.escape(shard.name)}.tmp-*")):
            os.remove(leftover)


def check_options(pattern: str, format: str, processes: int) -> None:
    """ValueError for an unknown format, processes < 1, or a pattern without one %-format for the number."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    try:
        names = {pattern % 0, pattern % 1}
    except (TypeError, ValueError):
        names = set()
    if len(names) != 2:
        raise ValueError(f"pattern needs one %-format for the shard number, like 'out-%06d.tar': {pattern!r}")


def plan(source: ConvertInput, pattern: str, maxcount: int, maxsize: float | None, format: str) -> Manifest:
    """The Manifest of converting `source` (reads its count, fingerprint and, with maxsize, its sizes)."""
    sizes = source.sizes() if maxsize is not None else None
    shards = [Shard(n, os.path.basename(pattern % n), start, stop)
              for n, (start, stop) in enumerate(plan_shards(len(source), maxcount, sizes, maxsize))]
    return Manifest(pattern, format, maxcount, maxsize, source.description, source.fingerprint(), shards)


def finished_shards(manifest: Manifest, directory: str) -> list[str]:
    """The shards of `manifest` already present with their planned count, when the manifest on disk
    matches it (no manifest: none); ValueError naming what changed when it does not."""
    path = manifest_path(manifest.pattern)
    if not os.path.exists(path):
        return []
    with open(path) as stream:
        why = manifest.mismatch(json.load(stream))
    if why is not None:
        raise ValueError(f"cannot resume into {path}: {why}; convert again without --resume")
    return [s.name for s in manifest.shards if shard_count(os.path.join(directory, s.name), manifest.format) == s.count]


def prepare(source: ConvertInput, pattern: str, *, maxcount: int = 10000, maxsize: float | None = None,
            format: str = "tar", processes: int = 1, resume: bool = False) -> tuple[Manifest, list[list[Shard]]]:
    """Everything before writing (module docstring, 1, 2, 4): check the options, plan, with `resume`
    keep the finished shards (Manifest.kept), remove leftover temporary files, write the manifest; returns
    the Manifest and the tasks (runs of the shards still to write, for `processes` processes).
    ValueError for bad options and for a resume the manifest refuses."""
    check_options(pattern, format, processes)
    directory = os.path.dirname(pattern) or "."
    os.makedirs(directory, exist_ok=True)
    manifest = plan(source, pattern, maxcount, maxsize, format)
    manifest.kept = finished_shards(manifest, directory) if resume else []
    pending = [s for s in manifest.shards if s.name not in set(manifest.kept)]
    _clear_leftovers(directory, manifest.shards)
    _write_atomic(manifest_path(pattern), manifest.to_json())
    return manifest, runs(pending, processes, source.sequential)
