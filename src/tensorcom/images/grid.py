"""A grid of images from one batch, with titles: what `tensorshow` writes.

    render(batch, "imgclass", ["0", "1"], limit=64)   -> a PIL image (labels of field 1 as titles)
    render(batch, "img2img", ["input", "output"], 16) -> each input beside its output
    to_uint8_images(value, name)                      any image batch -> uint8 (N, H, W, 3)

Fields are indices or dict keys (default: the first two). Floats are scaled to 0..255 ([0, 1] data by
255, others by their range). Needs Pillow; ValueError names a field that is missing or not images.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

TITLE_HEIGHT = 14


def to_uint8_images(value: Any, name: str) -> np.ndarray:
    """A batch of images → uint8 (N, H, W, 3); accepts NHW, NHWC and NCHW with 1, 3 or 4 channels."""
    a = np.asarray(value)
    if a.ndim == 4 and a.shape[1] in (1, 3, 4) and a.shape[3] not in (1, 3, 4):
        a = a.transpose(0, 2, 3, 1)
    if a.ndim == 3:
        a = a[..., None]
    if a.ndim != 4 or a.shape[3] not in (1, 3, 4):
        raise ValueError(f"field {name} is not a batch of images: shape {a.shape}")
    if a.dtype != np.uint8:
        a = a.astype(np.float64)
        low, high = float(a.min()), float(a.max())
        if low >= 0 and high <= 1:
            low, high = 0.0, 1.0
        a = (a - low) / max(high - low, 1e-12) * 255
        a = np.clip(a, 0, 255).astype(np.uint8)
    if a.shape[3] == 1:
        a = np.repeat(a, 3, axis=3)
    return a[..., :3]


def grid(cells: list, titles: list[str]) -> Any:
    """Paste equally sized HxWx3 uint8 cells into a square-ish grid with a title band above each."""
    from PIL import Image, ImageDraw

    h, w = cells[0].shape[:2]
    cols = math.ceil(math.sqrt(len(cells)))
    rows = math.ceil(len(cells) / cols)
    canvas = Image.new("RGB", (cols * (w + 2), rows * (h + TITLE_HEIGHT + 2)), "white")
    draw = ImageDraw.Draw(canvas)
    for i, (cell, title) in enumerate(zip(cells, titles)):
        x, y = (i % cols) * (w + 2), (i // cols) * (h + TITLE_HEIGHT + 2)
        canvas.paste(Image.fromarray(np.ascontiguousarray(cell)), (x, y + TITLE_HEIGHT))
        draw.text((x + 1, y + 1), title[: max(1, w // 6)], fill="black")
    return canvas


def pick(batch: Any, spec: str) -> Any:
    """The field named by `spec` (an index, or a key for dict batches)."""
    if isinstance(batch, dict):
        if spec not in batch:
            raise ValueError(f"no field {spec!r} in batch with keys {sorted(map(str, batch))}")
        return batch[spec]
    if not spec.lstrip("-").isdigit() or not -len(batch) <= int(spec) < len(batch):
        raise ValueError(f"no field {spec!r} in a batch of {len(batch)} fields")
    return batch[int(spec)]


def render(batch: Any, mode: str, fields: list[str], limit: int) -> Any:
    """A PIL image of at most `limit` images from field `fields[0]` (default: the first field), with
    imgclass: the labels of field `fields[1]` (default: the second, if any) as titles; img2img: each
    image beside its output image from field `fields[1]`."""
    names = list(batch) if isinstance(batch, dict) else [str(i) for i in range(len(batch))]
    first = fields[0] if fields else names[0]
    second = fields[1] if len(fields) > 1 else (names[1] if len(names) > 1 else None)
    images = to_uint8_images(pick(batch, first), first)[:limit]
    if mode == "img2img":
        if second is None:
            raise ValueError("--mode img2img needs a second field with the output images")
        outputs = to_uint8_images(pick(batch, second), second)[: len(images)]
        if outputs.shape[1:3] != images.shape[1:3]:
            raise ValueError(f"input images {images.shape} and outputs {outputs.shape} differ in size")
        return grid([np.concatenate([a, b], axis=1) for a, b in zip(images, outputs)], [""] * len(images))
    labels = pick(batch, second) if second is not None else [""] * len(images)
    titles = [str(labels[i].item() if hasattr(labels[i], "item") else labels[i]) for i in range(len(images))]
    return grid(list(images), titles)
