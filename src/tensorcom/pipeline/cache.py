"""A decoded-image cache: decode each image once, map it from a file in every later epoch.

    Pipeline(source).cache(dir, max_side=None, max_bytes=None)   (Pipeline.cache calls decoded_cache)
    Pipeline(source).cache(None, ...)  the directory the server gives: `tensorcom serve --cache DIR`
                                       (tensorcom.serve(cache=DIR) calls serve_in in each serving process)
    decoded_cache(source, dir, ...)    the map function: a dict sample -> the same sample with its image
                                       field an HWC uint8 array and "__cache__" = "hit" / "stored" / "full"
    cache_directory(dir, source, max_side, key=None)   the sub-directory of one (source, decoding)
    source_listing(source)             what identifies a source's data (paths, sizes, modification times)

What is cached is the deterministic part of an image pipeline: the read and the decode to uint8 RGB,
with `max_side` the shorter side brought down to max_side: decoded at the smallest DCT scale (1, 1/2,
1/4, 1/8; JPEG only, done by libjpeg-turbo for less than a full decode) that still covers it, then
resized by an antialiased bilinear filter, torch's where torch is installed (five times faster than
Pillow's; its result does not depend on torch's thread count), else Pillow's (decode_bounded). Which
of the two is part of the key, so the stored pixels are the same whichever process decodes them. What follows the cache stage (RandomResizedCrop, flip, normalize) runs every epoch on the
mapped array; a map with rng=True draws the same numbers whether its input was a hit or a miss,
because its generator is keyed by the sample's position, so an epoch's batches are the same bits
whether the cache was empty, full, or bounded (`max_bytes`) so that some images are decoded again.

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
import json
import os
from typing import Any

import numpy as np

from tensorcom import imagecodec
from tensorcom.checks import non_negative, positive
from tensorcom.extras import require
from tensorcom.pipeline._cache_store import EntryStore, remove_stale_temporaries
from tensorcom.pipeline.sources import field_name, read_bytes
from tensorcom.shards.fields import IMAGE_EXTS

FORMAT_VERSION = 1
MODE = "rgb8"


def resize_backend() -> str:
    """"torch" where torch can be imported, else "pil": the filter decode_bounded resizes with."""
    import importlib.util

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


def decode_bounded(data: bytes, max_side: int | None, resize: str = "pil") -> np.ndarray:
    """HWC uint8 RGB of `data` with its shorter side at most `max_side` (None: full size): decoded at
    the smallest DCT scale that keeps the shorter side >= max_side, then, if still larger, resized to
    exactly max_side by an antialiased bilinear filter: `resize` "torch" (torch's, on uint8) or
    "pil" (Pillow's). The same arguments give the same bits in every process of a machine."""
    needed = 1.0
    if max_side is not None:
        header = imagecodec.jpeg_header(data)
        width, height = header[:2] if header is not None else imagecodec.image_size(data)
        needed = min(1.0, max_side / min(width, height))
    array, _ = imagecodec.open_scaled(data if isinstance(data, bytes) else bytes(data), needed)
    height, width = array.shape[:2]
    if max_side is None or min(width, height) <= max_side:
        return np.ascontiguousarray(array)
    scale = max_side / min(width, height)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    if resize == "torch" and array.ndim == 3:
        return _torch_resize(array, size)
    Image = require("PIL.Image")
    return np.array(Image.fromarray(array).resize(size, Image.Resampling.BILINEAR))  # writable, as a hit's


def _torch_resize(array: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """HWC uint8 `array` resized to `size` (width, height) by torch's antialiased bilinear filter on
    uint8 (as images.resample's torch path); a new, writable array."""
    import torch
    import torch.nn.functional as F

    with torch.inference_mode():
        scaled = F.interpolate(torch.from_numpy(array).permute(2, 0, 1).unsqueeze(0), size=(size[1], size[0]),
                               mode="bilinear", antialias=True, align_corners=False)
        return scaled[0].permute(1, 2, 0).contiguous().numpy()


class DecodedCache:
    """The map function of Pipeline.cache (picklable; files open where it runs): a dict sample ->
    {**sample, image field: HWC uint8 array, "__cache__": outcome}. See the module docstring.
    `directory` None: `name` under the directory serve_in gave this process (found on first use)."""

    def __init__(self, directory: str | None, max_side: int | None = None, max_bytes: int | None = None,
                 resize: str = "pil", durable: bool = False, name: str = ""):
        self.max_side, self.resize, self.name = max_side, resize, name
        self.max_bytes, self.durable = max_bytes, durable
        self._store = None if directory is None else EntryStore(directory, max_bytes, durable)
        self.counts = {"hit": 0, "stored": 0, "full": 0}

    @property
    def store(self) -> EntryStore:
        if self._store is None:
            if _served_root is None:
                raise ValueError("cache() without a directory takes its server's: serve it with "
                                 "`tensorcom serve --cache DIR` (or tensorcom.serve(..., cache=DIR)), or name one")
            self._store = EntryStore(os.path.join(_served_root, self.name), self.max_bytes, self.durable)
        return self._store

    @property
    def directory(self) -> str:
        return self.store.directory

    def __repr__(self) -> str:
        where = self._store.directory if self._store is not None else f"<served>/{self.name}"
        return f"DecodedCache({where!r}, max_side={self.max_side}, max_bytes={self.max_bytes})"

    def __call__(self, sample: dict) -> dict:
        if not isinstance(sample, dict):
            raise TypeError(f"cache() takes dict samples, got {type(sample).__name__}")
        field, data = image_field(sample)
        key = entry_key(sample)
        array = self.store.load(key)
        if array is not None:
            outcome = "hit"
        else:
            array = decode_bounded(read_bytes(sample["__path__"]) if data is None else data, self.max_side,
                                   self.resize)
            outcome = self.store.save(key, array)
        self.counts[outcome] += 1
        return {**sample, field: array, "__cache__": outcome}

    def remove_stale(self) -> int:
        """Delete the temporary files of this host's killed writers; how many (tensorcom prepare)."""
        return remove_stale_temporaries(self.directory)

    def has(self, sample: dict) -> bool:
        """Whether the sample's entry is there (without reading or decoding anything)."""
        return self.store.has(entry_key(sample))


def decoded_cache(source: Any, directory: str | os.PathLike | None, *, max_side: int | None = None,
                  max_bytes: int | None = None, key: str | None = None, durable: bool = False) -> DecodedCache:
    """The DecodedCache for `source`'s data under `directory` (None: the server's, see serve_in;
    checked arguments; see the module);
    `durable`: fsync every entry before it appears (see _cache_store: survives a power loss too)."""
    if max_side is not None:
        positive("max_side", max_side)
    if max_bytes is not None:
        non_negative("max_bytes", max_bytes)
    if key is not None and not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}: {key!r}")
    resize = resize_backend()
    name = content_name(source, max_side, key, resize)
    where = None if directory is None else os.path.join(os.fspath(directory), name)
    return DecodedCache(where, max_side, max_bytes, resize, durable, name)
