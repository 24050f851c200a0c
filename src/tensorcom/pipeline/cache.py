"""The decoded-image cache's layer-neutral part: keys, the server's directory, the store.

    Pipeline(source).cache(dir, max_side=None, max_bytes=None)   (Pipeline.cache calls decoded_cache)
    Pipeline(source).cache(None, ...)  the directory the server gives: `tensorcom serve --cache DIR`
                                       (tensorcom.serve(cache=DIR) calls serve_in in each serving process)
    decoded_cache(source, dir, ...)    tensorcom.images.decoded_cache's map function (the decode-and-store
                                       stage: a dict sample -> the same sample with its image field an HWC
                                       uint8 array and "__cache__" = "hit" / "stored" / "full")
    cache_directory(dir, source, max_side, key=None)   the sub-directory of one (source, decoding)
    content_name(source, max_side, key, resize)        its name: the hash of the content's identity
    source_listing(source)             what identifies a source's data (paths, sizes, modification times)
    entry_key(sample), image_field(sample)   an entry's key and the sample's image field
    serve_in(dir), served_root()       the directory of `cache(None)` stages in this process
    EntryStore, cut_stale_tails   the files (tensorcom.pipeline._cache_store)

What is cached is the deterministic part of an image pipeline, the read and the decode to uint8 RGB
(shorter side at most `max_side`): tensorcom.images.decoded_cache decodes, resizes with the package's
one resize (images.resample) and stores. This layer comes before the images layer, so it names that
stage (DECODE_STAGE) and imports it by that name when Pipeline.cache is built, as the package's lazy
public names are imported; it never imports the images layer itself.

Keys: the sub-directory is a hash of the format version, the decoding (mode, max_side, resize) and the
source's listing (every file's path, size and modification time, or every shard URL with the size
and time of local ones); inside it each entry is named by the sample's `__url__` and `__key__`. A
changed dataset, decode option or max_side is therefore another directory (a miss), never a wrong
image. Sources without a listing need `key=` (a string naming the data's version). The files, the
crash safety and the size bound are tensorcom.pipeline._cache_store's.

Counts: each process's stage counts its outcomes (`counts`: hit, stored, full); the samples carry
theirs in "__cache__" for counting across processes (tensorcom prepare does).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from typing import Any

from tensorcom.pipeline._cache_store import EntryStore, cut_stale_tails
from tensorcom.pipeline.sources import field_name
from tensorcom.shards.fields import IMAGE_EXTS

__all__ = ["DECODE_STAGE", "EntryStore", "cache_directory", "content_name", "cut_stale_tails",
           "decoded_cache", "entry_key", "image_field", "resize_backend", "serve_in", "served_root",
           "source_listing"]

FORMAT_VERSION = 2  # 2: append-only segments and an index (1: a file per entry)
MODE = "rgb8"
DECODE_STAGE = "tensorcom.images.decoded_cache:decoded_cache"


def resize_backend() -> str:
    """"torch" where torch can be imported, else "pil": the filter the decode stage resizes with."""
    return "torch" if importlib.util.find_spec("torch") is not None else "pil"


def _stat(path: str) -> list:
    """[size, mtime_ns] of a local file, [] for a remote URL or a missing file."""
    local = path[len("file://"):] if path.startswith("file://") else path
    if "://" in local:
        return []
    try:
        status = os.stat(local)
    except OSError:
        return []
    return [status.st_size, status.st_mtime_ns]


def source_listing(source: Any) -> list:
    """A JSON-able description of the data behind `source`: [path, label, size, mtime] per image of an
    ImageFolderSource (anything with `items()` of (path, label)), [url, size, mtime] per shard of a
    ShardSource (`urls`) or path of a PathSource (`paths`). TypeError for any other source."""
    if callable(getattr(source, "items", None)):
        return [["item", os.fspath(path), int(label), *_stat(os.fspath(path))] for path, label in source.items()]
    for attribute in ("urls", "paths"):
        if isinstance(getattr(source, attribute, None), (list, tuple)):
            return [[attribute, str(url), *_stat(str(url))] for url in getattr(source, attribute)]
    raise TypeError(f"cannot tell what data a {type(source).__name__} reads: pass cache(..., key='name and "
                    f"version of the data')")


_served_root: str | None = None  # this process's server's --cache DIR (serve_in)


def serve_in(root: str | os.PathLike | None) -> None:
    """Make `root` the directory of every `cache(None)` stage this process runs (a serving process
    of tensorcom.serve(cache=root) calls it before building its pipeline; None: none)."""
    global _served_root
    _served_root = None if root is None else os.fspath(root)


def served_root() -> str:
    """The directory serve_in gave this process; ValueError saying how to give one when there is none."""
    if _served_root is None:
        raise ValueError("cache() without a directory takes its server's: serve it with "
                         "`tensorcom serve --cache DIR` (or tensorcom.serve(..., cache=DIR)), or name one")
    return _served_root


def cache_directory(root: str | os.PathLike, source: Any, max_side: int | None, key: str | None = None,
                    resize: str = "pil") -> str:
    """root/<hash of format, decoding (max_side, `resize` backend when max_side is set) and source (or
    `key`)>: one directory per distinct content."""
    return os.path.join(os.fspath(root), content_name(source, max_side, key, resize))


def content_name(source: Any, max_side: int | None, key: str | None = None, resize: str = "pil") -> str:
    """The hash naming a cache's sub-directory (see cache_directory)."""
    identity = {"format": FORMAT_VERSION, "mode": MODE, "max_side": max_side,
                "source": source_listing(source) if key is None else ["key", key]}
    if max_side is not None and resize != "pil":  # "pil" keeps the directories of earlier caches
        identity["resize"] = resize
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def entry_key(sample: dict) -> str:
    """The name of a sample's entry: its `__url__` (shard) and `__key__`; ValueError without a key."""
    if "__key__" not in sample:
        raise ValueError(f"a cached sample needs a '__key__'; it has {sorted(sample)}")
    return f"{sample.get('__url__') or ''}\n{sample['__key__']}"


def image_field(sample: dict) -> tuple[str, Any]:
    """(field, encoded bytes) of the sample's image: its first field whose extension is an image's
    (shards.fields.IMAGE_EXTS), else the file at `__path__` (read here) under its extension."""
    for name, value in sample.items():
        if name.rsplit(".", 1)[-1].lower() in IMAGE_EXTS and isinstance(value, (bytes, bytearray, memoryview)):
            return name, value
    if "__path__" in sample:
        return field_name(sample["__path__"]), None
    raise KeyError(f"sample {sample.get('__key__')!r} has no image field ({'/'.join(sorted(IMAGE_EXTS))}) "
                   f"and no __path__; it has {sorted(sample)}")


def decoded_cache(source: Any, directory: str | os.PathLike | None, *, max_side: int | None = None,
                  max_bytes: int | None = None, key: str | None = None, durable: bool = False) -> Any:
    """Pipeline.cache's map function: tensorcom.images.decoded_cache.decoded_cache(source, directory,
    ...), a DecodedCache (see there), imported by its name DECODE_STAGE (see the module docstring)."""
    module, _, name = DECODE_STAGE.partition(":")
    stage = getattr(importlib.import_module(module), name)
    return stage(source, directory, max_side=max_side, max_bytes=max_bytes, key=key, durable=durable)
