"""A grid of images from one batch, with titles: what `tensorshow` writes.

    render(batch, "imgclass", ["0", "1"], limit=64)   -> a PIL image (labels of field 1 as titles)
    render(batch, "img2img", ["input", "output"], 16) -> each input beside its output
    choose(batch, "imgclass", [], classes=None)       -> Choice: the fields and class names render uses
    to_uint8_images(value, name)                      any image batch -> uint8 (N, H, W, 3)

Fields are indices or dict keys. By default the images are the first field that looks like a batch of
images (a uint8 or float array of rank 4 with 1, 3 or 4 channels, NHWC or NCHW), the labels the first
other field with one label per image (fields named `__...__` are not picked by default). Integer labels
are shown as class names when `classes` is given or the batch carries a list of them as a plain value
`__classes__` or `names`. Floats are scaled to 0..255 ([0, 1] data by 255, others by their range).
Needs Pillow; ValueError names a field that is missing or not images.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tensorcom.extras import require

TITLE_HEIGHT = 14
CLASS_NAME_FIELDS = ("__classes__", "names")


@dataclass
class Choice:
    """What a grid shows: `images` (a field name), `second` (labels for imgclass, output images for
    img2img, or None), and `names` (class names for integer labels, from `names_from`) or None."""

    images: str
    second: str | None = None
    names: Sequence[str] | None = None
    names_from: str | None = None

    def describe(self, mode: str) -> str:
        """One line: which fields the grid shows, and where the class names came from."""
        text = f"images from field {self.images!r}"
        if self.second is not None:
            text += f", {'outputs' if mode == 'img2img' else 'titles'} from {self.second!r}"
        return text + (f" (class names from {self.names_from})" if self.names_from else "")


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
    require("PIL")
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


def is_images(value: Any) -> bool:
    """True for a uint8 or float array of rank 4 with 1, 3 or 4 channels (NHWC or NCHW)."""
    dtype = getattr(value, "dtype", None)
    if getattr(value, "ndim", 0) != 4 or dtype is None:
        return False
    return (dtype == np.uint8 or np.issubdtype(dtype, np.floating)) and (
        value.shape[3] in (1, 3, 4) or value.shape[1] in (1, 3, 4))


def is_labels(value: Any, count: int) -> bool:
    """True for one label per image: a rank-1 integer/string array or a list of str/int, >= count long."""
    if isinstance(value, (list, tuple)):
        return len(value) >= count and all(isinstance(v, (str, int)) for v in value)
    dtype = getattr(value, "dtype", None)
    return getattr(value, "ndim", 0) == 1 and len(value) >= count and dtype is not None and dtype.kind in "iuU"


def choose(batch: Any, mode: str, fields: list[str], classes: Sequence[str] | None = None) -> Choice:
    """The fields a grid of `batch` shows: `fields` where given, else the defaults of the module
    docstring (img2img: the first two image fields); `classes` overrides names carried by the batch."""
    keys = list(batch) if isinstance(batch, dict) else [str(i) for i in range(len(batch))]
    candidates = [k for k in keys if not (k.startswith("__") and k.endswith("__"))]
    image_fields = [k for k in candidates if is_images(pick(batch, k))]
    if fields:
        first = fields[0]
    elif image_fields:
        first = image_fields[0]
    else:
        raise ValueError(f"no field holds a batch of images (rank 4, 1/3/4 channels) in fields {keys}; "
                         "name one with --fields")
    count = len(pick(batch, first))
    if len(fields) > 1:
        second = fields[1]
    elif mode == "img2img":
        second = next((k for k in image_fields if k != first), None)
    else:
        second = next((k for k in candidates if k != first and is_labels(pick(batch, k), count)), None)
    names_from = "--classes" if classes is not None else None
    if classes is None and isinstance(batch, dict):
        names_from = next((k for k in CLASS_NAME_FIELDS if isinstance(batch.get(k), (list, tuple))), None)
        classes = batch[names_from] if names_from else None
    return Choice(first, second, None if classes is None else [str(c) for c in classes], names_from)


def title(label: Any, names: Sequence[str] | None) -> str:
    """A label as a title: its class name when `names` has one for it, else the label itself."""
    label = label.item() if hasattr(label, "item") else label
    if names is not None and isinstance(label, int) and 0 <= label < len(names):
        return names[label]
    return str(label)


def draw(batch: Any, choice: Choice, mode: str, limit: int) -> Any:
    """A PIL image of at most `limit` images of `choice.images`; imgclass: the labels of
    `choice.second` as titles; img2img: each image beside its output image from `choice.second`."""
    images = to_uint8_images(pick(batch, choice.images), choice.images)[:limit]
    if mode == "img2img":
        if choice.second is None:
            raise ValueError("--mode img2img needs a second field with the output images")
        outputs = to_uint8_images(pick(batch, choice.second), choice.second)[: len(images)]
        if outputs.shape[1:3] != images.shape[1:3]:
            raise ValueError(f"input images {images.shape} and outputs {outputs.shape} differ in size")
        return grid([np.concatenate([a, b], axis=1) for a, b in zip(images, outputs)], [""] * len(images))
    labels = pick(batch, choice.second) if choice.second is not None else [""] * len(images)
    return grid(list(images), [title(labels[i], choice.names) for i in range(len(images))])


def render(batch: Any, mode: str, fields: list[str], limit: int, classes: Sequence[str] | None = None) -> Any:
    """draw(batch, choose(batch, mode, fields, classes), mode, limit): the grid with default fields."""
    return draw(batch, choose(batch, mode, fields, classes), mode, limit)
