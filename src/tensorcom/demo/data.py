"""A small synthetic labelled image dataset for `tensorcom demo`: coloured shapes as JPEG.

Class k is one shape drawn in one colour (both differ between any two classes), at a random
position and size, on a noisy dark background. Written once as

    ROOT/train/<class>/<n>.jpg, ROOT/test/<class>/<n>.jpg       (an ImageFolder tree)
    ROOT/shards/train-000000.tar ..., ROOT/shards/test-000000.tar  (jpg + cls members)
    ROOT/COMPLETE                                                (written last; JSON of the arguments)

under settings.cache_dir()/"demo"/<arguments> unless `root` is given. A tree without COMPLETE (an
interrupted run) or made with other arguments is made again. The tree is built in a temporary
sibling directory and renamed into place, so concurrent callers never see a half-made dataset.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tensorcom import settings
from tensorcom.extras import require

SHAPES = ("circle", "square", "triangle", "cross", "ring", "diamond", "hbar", "vbar", "x", "star")
COLOURS = {  # (R, G, B): far apart in hue and brightness
    "red": (230, 30, 30), "green": (30, 200, 40), "blue": (40, 70, 240), "yellow": (240, 230, 30),
    "magenta": (230, 40, 220), "cyan": (40, 220, 230), "orange": (250, 140, 20),
    "white": (245, 245, 245), "purple": (150, 50, 210), "pink": (255, 150, 190),
}
MARKER = "COMPLETE"
_OURS = {"train", "test", "shards", MARKER}


@dataclass(frozen=True)
class DemoDataset:
    """Where a made demo dataset lies: ImageFolder trees, tar shards (lists and brace patterns)."""

    root: Path
    train_dir: Path
    test_dir: Path
    shards: list[str] = field(default_factory=list)
    test_shards: list[str] = field(default_factory=list)
    shard_pattern: str = ""
    test_shard_pattern: str = ""
    classes: list[str] = field(default_factory=list)


def class_names(classes: int = 10) -> list[str]:
    """Names "<colour>-<shape>" of the first `classes` classes (1..10), sorted as ImageFolder sorts them."""
    if isinstance(classes, bool) or not isinstance(classes, int) or not 1 <= classes <= len(SHAPES):
        raise ValueError(f"classes must be an int in 1..{len(SHAPES)}, got {classes!r}")
    names = [f"{c}-{s}" for c, s in zip(COLOURS, SHAPES)][:classes]
    return sorted(names)


def _polygon(kind: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    """Vertices of a polygonal shape centred at (cx, cy) with radius r."""
    if kind == "triangle":
        angles = [-90, 30, 150]
    elif kind == "diamond":
        angles = [-90, 0, 90, 180]
    else:  # star: 5 points, alternate radii
        pts = []
        for i in range(10):
            a = math.radians(-90 + 36 * i)
            rr = r if i % 2 == 0 else r * 0.45
            pts.append((cx + rr * math.cos(a), cy + rr * math.sin(a)))
        return pts
    return [(cx + r * math.cos(math.radians(a)), cy + r * math.sin(math.radians(a))) for a in angles]


def _draw(draw, kind: str, cx: float, cy: float, r: float, colour: tuple[int, int, int]) -> None:
    """Draw one shape of the given kind on a Pillow ImageDraw."""
    box = (cx - r, cy - r, cx + r, cy + r)
    t = max(2.0, r * 0.45)  # stroke thickness of bars and crosses
    if kind == "circle":
        draw.ellipse(box, fill=colour)
    elif kind == "square":
        draw.rectangle((cx - r * 0.8, cy - r * 0.8, cx + r * 0.8, cy + r * 0.8), fill=colour)
    elif kind == "ring":
        draw.ellipse(box, outline=colour, width=max(2, int(r * 0.3)))
    elif kind in ("cross", "hbar"):
        draw.rectangle((cx - r, cy - t / 2, cx + r, cy + t / 2), fill=colour)
        if kind == "cross":
            draw.rectangle((cx - t / 2, cy - r, cx + t / 2, cy + r), fill=colour)
    elif kind == "vbar":
        draw.rectangle((cx - t / 2, cy - r, cx + t / 2, cy + r), fill=colour)
    elif kind == "x":
        width = max(2, int(t))
        draw.line((cx - r, cy - r, cx + r, cy + r), fill=colour, width=width)
        draw.line((cx - r, cy + r, cx + r, cy - r), fill=colour, width=width)
    else:
        draw.polygon(_polygon(kind, cx, cy, r), fill=colour)


def render(label: int, size: int, rng: np.random.Generator) -> bytes:
    """One JPEG of class `label` (index into the unsorted shape/colour lists) at size x size."""
    require("PIL")
    from PIL import Image, ImageDraw

    background = rng.integers(10, 60) + rng.integers(-8, 9, 3)  # dark, nearly gray
    noise = rng.normal(0, 10, (size, size, 3)) + background
    im = Image.fromarray(np.clip(noise, 0, 255).astype(np.uint8))
    colour = np.array(list(COLOURS.values())[label]) + rng.integers(-15, 16, 3)
    r = size * rng.uniform(0.25, 0.38)
    cx, cy = rng.uniform(r + 1, size - r - 1, 2)
    _draw(ImageDraw.Draw(im), SHAPES[label], cx, cy, r, tuple(int(v) for v in np.clip(colour, 0, 255)))
    out = io.BytesIO()
    im.save(out, "JPEG", quality=90)
    return out.getvalue()


def _write_split(base: Path, split: str, per_class: int, names: list[str], size: int,
                 rng: np.random.Generator) -> None:
    """Write base/split/<class>/*.jpg and base/shards/split-*.tar (found again by `_dataset`)."""
    from tensorcom.shards import ShardWriter

    order = [f"{c}-{s}" for c, s in zip(COLOURS, SHAPES)]
    samples = []
    for name in names:
        (base / split / name).mkdir(parents=True)
        for i in range(per_class):
            data = render(order.index(name), size, rng)
            (base / split / name / f"{i:05d}.jpg").write_bytes(data)
            samples.append((f"{split}-{name}-{i:05d}", data, names.index(name)))
    # shards hold the samples shuffled, as a training pipeline reads them
    pattern = str(base / "shards" / f"{split}-%06d.tar")
    (base / "shards").mkdir(exist_ok=True)
    with ShardWriter(pattern, maxcount=250) as sink:
        for j in rng.permutation(len(samples)):
            key, data, label = samples[j]
            sink.write({"__key__": key, "jpg": data, "cls": label})


def _brace(paths: list[str]) -> str:
    """A brace pattern ("dir/train-{000000..000002}.tar") naming exactly `paths` (as made above)."""
    if len(paths) == 1:
        return paths[0]
    head, first = paths[0].rsplit("-", 1)
    last = paths[-1].rsplit("-", 1)[1]
    return f"{head}-{{{first[:-4]}..{last[:-4]}}}.tar"


def _dataset(root: Path, names: list[str]) -> DemoDataset:
    """The DemoDataset description of a made tree at `root`."""
    shards = sorted(str(p) for p in (root / "shards").glob("train-*.tar"))
    test_shards = sorted(str(p) for p in (root / "shards").glob("test-*.tar"))
    return DemoDataset(root, root / "train", root / "test", shards, test_shards,
                       _brace(shards), _brace(test_shards), names)


def _complete(root: Path, params: dict) -> bool:
    """True when `root` holds a finished dataset made with exactly `params`."""
    try:
        return json.loads((root / MARKER).read_text()) == params
    except (OSError, ValueError):
        return False


def _replace(root: Path, made: Path, params: dict) -> None:
    """Move the freshly made tree `made` to `root`, unless another process finished one there
    first (then `made` is dropped); a stale tree of ours at `root` is removed first."""
    if _complete(root, params):
        shutil.rmtree(made, ignore_errors=True)
        return
    if root.exists():
        strangers = {p.name for p in root.iterdir()} - _OURS
        if strangers:
            shutil.rmtree(made)
            raise ValueError(f"{root} holds files that are not a demo dataset: {sorted(strangers)[:5]}")
        shutil.rmtree(root, ignore_errors=True)
    try:
        os.rename(made, root)
    except OSError:  # another process put a tree there in the meantime: keep that one
        shutil.rmtree(made, ignore_errors=True)


def make_demo_dataset(root: str | os.PathLike | None = None, *, classes: int = 10,
                      per_class_train: int = 200, per_class_test: int = 50, size: int = 64,
                      seed: int = 0) -> DemoDataset:
    """Make (once; cached) the coloured-shapes dataset and return where it lies.

    `root` defaults to settings.cache_dir()/demo/<arguments>. `classes` (1..10) classes of
    `per_class_train` training and `per_class_test` held-out JPEGs of size x size pixels (>= 16),
    all drawn from numpy's Generator seeded with `seed`.
    """
    names = class_names(classes)
    for label, value in (("per_class_train", per_class_train), ("per_class_test", per_class_test),
                         ("size", size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (16 if label == "size" else 1):
            raise ValueError(f"{label} must be a positive int (size >= 16), got {value!r}")
    params = {"classes": classes, "train": per_class_train, "test": per_class_test,
              "size": size, "seed": seed, "version": 1}
    if root is None:
        root = settings.cache_dir() / "demo" / f"c{classes}-n{per_class_train}-t{per_class_test}-s{size}-r{seed}"
    root = Path(root)
    if not _complete(root, params):
        root.parent.mkdir(parents=True, exist_ok=True)
        made = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
        rng = np.random.default_rng(seed)
        _write_split(made, "train", per_class_train, names, size, rng)
        _write_split(made, "test", per_class_test, names, size, rng)
        (made / MARKER).write_text(json.dumps(params))
        _replace(root, made, params)
    return _dataset(root, names)
