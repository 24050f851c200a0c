"""Image pipeline benchmark: PyTorch DataLoader vs tensorcom's pipeline vs serve-imagenet-dir.

On one ImageFolder of ImageNet-like JPEGs (about 500x375, ~100 KB, made once under bench-data/), with
RandomResizedCrop(224) + horizontal flip, batch 64, uint8 output, in one run:

  (a) torch DataLoader, num_workers=2, with a PIL implementation of the transform (torchvision's way)
  (b) tensorcom.Pipeline in this process with 2 worker processes
  (c) serve-imagenet-dir (a real subprocess, 2 publishers) -> tensorcom.Connection over loopback

and prints img/s, CPU-seconds per 1,000 images (this process + its children) and the ratios (b)/(a)
and (c)/(b). Then a threads x processes grid for the same images fetched from a local HTTP server.

    ./run bench benchmarks/pipeline.py            # full run (a few minutes)
    ./run bench benchmarks/pipeline.py --quick    # a short run
"""

from __future__ import annotations

import argparse
import functools
import http.server
import io
import os
import random
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench-data" / "imagenet-like"
CLASSES = 10
SIZE = 224
BATCH = 64


# ---------------------------------------------------------------- the data


def synthetic_photo(rng: np.random.Generator, height: int = 375, width: int = 500) -> np.ndarray:
    """A uint8 (H, W, 3) image with smooth colour regions and photo-like texture (JPEGs of ~100 KB)."""
    from PIL import Image

    coarse = rng.integers(0, 256, (6, 8, 3)).astype(np.uint8)
    image = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BILINEAR)).astype(np.float32)
    texture = rng.normal(0, 1, (height // 4 + 1, width // 4 + 1, 3)).astype(np.float32)
    image += np.repeat(np.repeat(texture, 4, 0), 4, 1)[:height, :width] * 22
    image += rng.normal(0, 6, (height, width, 3)).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def make_dataset(count: int, root: Path = DATA) -> Path:
    """Write `count` JPEGs into root/train/<class>/ (once; kept when enough are there); returns root."""
    import simplejpeg

    train = root / "train"
    existing = sorted(train.glob("*/*.jpg")) if train.exists() else []
    if len(existing) >= count:
        return root
    rng = np.random.default_rng(0)
    print(f"writing {count} JPEGs to {train} ...", flush=True)
    for i in range(count):
        folder = train / f"n{i % CLASSES:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        data = simplejpeg.encode_jpeg(synthetic_photo(rng), quality=90)
        (folder / f"img{i:06d}.jpg").write_bytes(data)
    return root


def image_files(root: Path, limit: int) -> list[tuple[str, int]]:
    """(path, label) pairs of the first `limit` images, classes in sorted order."""
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    pairs = [(str(p), label) for label, name in enumerate(classes) for p in sorted((root / "train" / name).glob("*.jpg"))]
    return sorted(pairs, key=lambda pair: Path(pair[0]).name)[:limit]


# ---------------------------------------------------------------- measuring


def cpu_seconds() -> float:
    """User + system CPU seconds of this process plus its reaped descendants."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(name: str, run) -> dict:
    """Run `run()` (which returns the number of images it produced, children reaped) and time it."""
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    images = run()
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    result = {"name": name, "images": images, "wall": wall, "rate": images / wall, "cpu_per_k": 1000 * cpu / max(images, 1)}
    print(f"  {name}: {images} images in {wall:.1f} s = {result['rate']:.0f} img/s, {result['cpu_per_k']:.2f} CPU-s/1k", flush=True)
    return result


def check_batch(images, labels) -> int:
    """Assert one batch has the benchmark's shape and dtype; return its size."""
    images, labels = np.asarray(images), np.asarray(labels)
    if images.shape[1:] != (SIZE, SIZE, 3) or images.dtype != np.uint8 or labels.shape != images.shape[:1]:
        raise RuntimeError(f"unexpected batch {images.dtype} {images.shape}, labels {labels.shape}")
    return len(images)


# ---------------------------------------------------------------- (a) DataLoader + PIL


def pil_random_resized_crop(image, size: int, rng: random.Random, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop on a PIL image: pick an area/aspect box (10 tries, then a
    centre crop of clamped aspect), crop and resize it to size x size with bilinear filtering."""
    from PIL import Image

    width, height = image.size
    area = width * height
    log_ratio = (np.log(ratio[0]), np.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = float(np.exp(rng.uniform(*log_ratio)))
        w, h = int(round((target * aspect) ** 0.5)), int(round((target / aspect) ** 0.5))
        if 0 < w <= width and 0 < h <= height:
            left, top = rng.randint(0, width - w), rng.randint(0, height - h)
            return image.resize((size, size), Image.BILINEAR, box=(left, top, left + w, top + h))
    aspect = width / height
    w, h = (width, int(round(width / ratio[0]))) if aspect < ratio[0] else (
        (int(round(height * ratio[1])), height) if aspect > ratio[1] else (width, height))
    w, h = min(w, width), min(h, height)
    left, top = (width - w) // 2, (height - h) // 2
    return image.resize((size, size), Image.BILINEAR, box=(left, top, left + w, top + h))


class PILFolder:
    """A map-style torch dataset: (path, label) -> (uint8 HWC array, label) via PIL, crop and flip."""

    def __init__(self, pairs: list[tuple[str, int]], size: int = SIZE):
        self.pairs, self.size = pairs, size

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int):
        from PIL import Image

        path, label = self.pairs[index]
        rng = random.Random(index * 7919 + 17)
        with open(path, "rb") as stream:
            image = Image.open(stream).convert("RGB")
        image = pil_random_resized_crop(image, self.size, rng)
        if rng.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        return np.asarray(image), label


def run_dataloader(pairs: list[tuple[str, int]]) -> int:
    """(a): iterate a DataLoader(num_workers=2, shuffle) over PILFolder once; returns images seen."""
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(PILFolder(pairs), batch_size=BATCH, shuffle=True, num_workers=2)
    count = 0
    for images, labels in loader:
        count += check_batch(images.numpy(), labels.numpy())
    del loader
    torch.multiprocessing.active_children() if hasattr(torch.multiprocessing, "active_children") else None
    return count
