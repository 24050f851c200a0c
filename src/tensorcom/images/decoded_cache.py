"""The decode-and-store stage of the decoded-image cache: decode each image once, map it from a file later.

    decoded_cache(source, dir, max_side=None, max_bytes=None, key=None, durable=False)
                                       the map function Pipeline.cache and the servers' Augment(cache=)
                                       apply: a dict sample -> the same sample with its image field an
                                       HWC uint8 array and "__cache__" = "hit" / "stored" / "full"
    decode_bounded(data, max_side, resize)   the decode it stores: bytes -> HWC uint8, shorter side
                                       <= max_side

What is cached is the deterministic part of an image pipeline: the read and the decode to uint8 RGB,
with `max_side` the shorter side brought down to max_side: decoded at the smallest DCT scale (1, 1/2,
1/4, 1/8; JPEG only, done by libjpeg-turbo for less than a full decode) that still covers it, then
resized by the antialiased bilinear filter of tensorcom.images.resample (the one resize of the
package): torch's where torch is installed (five times faster than Pillow's; its result does not
depend on torch's thread count), else Pillow's. Which of the two is part of the key, so the stored
pixels are the same whichever process decodes them. What follows (RandomResizedCrop, flip, normalize)
runs every epoch on the array: a miss hands on the array it decoded and stored (one decode, no copy),
a hit the one it maps from the file. A map with rng=True draws the same numbers whether its input was
a hit or a miss, because its generator is keyed by the sample's position, so an epoch's batches are
the same bits whether the cache was empty, full, or bounded (`max_bytes`) so that some images are
decoded again.

The keys, the directory a server gives (`cache(None)`) and the layer-neutral part are
tensorcom.pipeline.cache's; the files, their crash safety and the size bound are its store's.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tensorcom import imagecodec
from tensorcom.checks import non_negative, positive
from tensorcom.images.resample import resize_box
from tensorcom.pipeline.cache import (
    EntryStore,
    content_name,
    cut_stale_tails,
    entry_key,
    image_field,
    resize_backend,
    served_root,
)
from tensorcom.pipeline.sources import read_bytes


def decode_bounded(data: bytes, max_side: int | None, resize: str = "pil") -> np.ndarray:
    """HWC uint8 RGB of `data` with its shorter side at most `max_side` (None: full size): decoded at
    the smallest DCT scale that keeps the shorter side >= max_side, then, if still larger, resized to
    exactly max_side by images.resample's antialiased bilinear filter, `resize` "torch" or "pil".
    Writable (as a hit's map is); the same arguments give the same bits in every process of a machine."""
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
    return resize_box(array, (0, 0, width, height), size, backend=resize)


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
            self._store = EntryStore(os.path.join(served_root(), self.name), self.max_bytes, self.durable)
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
        """Cut what this host's killed writers left unindexed in their segments; how many (tensorcom prepare)."""
        return cut_stale_tails(self.directory)

    def has(self, sample: dict) -> bool:
        """Whether the sample's entry is there (without reading or decoding anything)."""
        return self.store.has(entry_key(sample))


def decoded_cache(source: Any, directory: str | os.PathLike | None, *, max_side: int | None = None,
                  max_bytes: int | None = None, key: str | None = None, durable: bool = False) -> DecodedCache:
    """The DecodedCache for `source`'s data under `directory` (None: the server's, see
    pipeline.cache.serve_in; checked arguments; see the module); `durable`: fsync every entry before
    it appears (see pipeline._cache_store: survives a power loss too)."""
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
