"""Does region decoding get faster when the JPEGs carry restart markers?

A RandomResizedCrop keeps a region of the image; our decode (tensorcom.imagecodec.open_region, through
libjpeg-turbo 3's cropping region, tensorcom._jpegcrop) skips the IDCT and colour conversion outside
it, but the Huffman (entropy) decoding of a baseline JPEG is sequential: every block before the
region's last row is entropy-decoded. Restart markers (RSTn every N MCU rows or blocks) make points
where a decoder could resume without decoding what lies before. `jpegtran -restart N[B]` adds them
losslessly (the same pixels), so a shard writer could add them once. This script measures, on the
pipeline benchmark's JPEGs (benchmarks/pipeline.py's bench-data/, made there when missing), in one
process:

  decode  imagecodec.open_region for a RandomResizedCrop(224, scale=(0.08, 1)) box per image
          (fixed seed, the same boxes for every variant)
  full    the whole train_transform(224): decode + crop + resize + flip, what a worker pays per image

for the original files, `jpegtran -restart 1` (a marker every MCU row) and `jpegtran -restart 1B`
(every MCU), checking that every variant decodes to the same pixels, and prints ms per image (best of
--repeats interleaved passes, CPU time of this process), the speed-up against the original and the size overhead. Needs
`jpegtran` (Debian: libjpeg-turbo-progs).

    .venv/bin/python benchmarks/restart_markers.py [--images 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline import make_dataset  # noqa: E402  (the pipeline benchmark's images)

VARIANTS = {"original": None, "restart every MCU row": "1", "restart every MCU": "1B"}


def with_restarts(data: bytes, interval: str | None) -> bytes:
    """`data` with restart markers every `interval` (jpegtran's -restart N or NB), losslessly."""
    if interval is None:
        return data
    return subprocess.run(["jpegtran", "-restart", interval, "-copy", "none"], input=data, capture_output=True,
                          check=True).stdout


def boxes_for(images: list[bytes], seed: int) -> list[tuple]:
    """One RandomResizedCrop(224) box per image, drawn as the training transform draws them."""
    from tensorcom import imagecodec
    from tensorcom.images.augment import RandomResizedCrop

    crop, rng = RandomResizedCrop(224), np.random.default_rng(seed)
    return [crop.box(*imagecodec.image_size(data), rng) for data in images]


def decode_pass(images: list[bytes], boxes: list[tuple]) -> float:
    """Seconds to decode each image's box region at the DCT scale the crop needs."""
    from tensorcom import imagecodec

    start = time.process_time()
    for data, box in zip(images, boxes):
        imagecodec.open_region(data, box, 224 / min(box[2] - box[0], box[3] - box[1]))
    return time.process_time() - start


def full_pass(images: list[bytes], seed: int) -> float:
    """Seconds for train_transform(224) (decode, crop, resize, flip) over the images."""
    from tensorcom.images.augment import train_transform

    transform, rng = train_transform(224), np.random.default_rng(seed)
    start = time.process_time()
    for data in images:
        transform(data, rng)
    return time.process_time() - start


def skippable(images: list[bytes], boxes: list[tuple]) -> tuple[float, float]:
    """The shares of the area entropy-decoded today (every row down to the box's bottom) that a
    decoder resuming at restart markers could skip: (rows above the box, with a marker every MCU
    row; also the columns beside it, with a marker every MCU), MCU rounding left out."""
    from tensorcom import imagecodec

    today = rows = blocks = 0.0
    for data, (left, top, right, bottom) in zip(images, boxes):
        width, _ = imagecodec.image_size(data)
        today += bottom * width
        rows += (bottom - top) * width
        blocks += (bottom - top) * (right - left)
    return 1 - rows / today, 1 - blocks / today


def same_pixels(variants: dict[str, list[bytes]], boxes: list[tuple]) -> bool:
    """True when every variant decodes every box to the original's pixels."""
    from tensorcom import imagecodec

    for i, box in enumerate(boxes):
        needed = 224 / min(box[2] - box[0], box[3] - box[1])
        arrays = [imagecodec.open_region(images[i], box, needed)[0] for images in variants.values()]
        if any(not np.array_equal(arrays[0], other) for other in arrays[1:]):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=300, help="JPEGs measured (default 300)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved passes, best kept (default 3)")
    args = parser.parse_args(argv)
    if shutil.which("jpegtran") is None:
        print("jpegtran not found (Debian: apt-get install libjpeg-turbo-progs)", file=sys.stderr)
        return 2
    from tensorcom import _jpegcrop
    from tensorcom.images.resample import init_worker

    init_worker()  # one torch thread, as in the pipeline's workers
    root = make_dataset(max(args.images, 640))
    files = sorted((root / "train").glob("*/*.jpg"))[: args.images]
    originals = [path.read_bytes() for path in files]
    variants = {name: [with_restarts(data, interval) for data in originals] for name, interval in VARIANTS.items()}
    boxes = boxes_for(originals, seed=0)
    print(f"{len(originals)} JPEGs from {root}; region decoding available: {_jpegcrop.available()}; "
          f"the same pixels in every variant: {same_pixels(variants, boxes)}", flush=True)
    above, beside = skippable(originals, boxes)
    print(f"a decoder that resumed at restart markers could skip {100 * above:.0f}% of the entropy decoding "
          f"done today (every MCU row), {100 * beside:.0f}% (every MCU)", flush=True)
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.repeats):
        for name, images in variants.items():
            for what, seconds in (("decode", decode_pass(images, boxes)), ("full", full_pass(images, seed=1))):
                best[name, what] = min(best.get((name, what), float("inf")), seconds)
    size0 = sum(map(len, originals))
    print("\n| files | bytes vs original | decode region, ms/image | speed-up | whole transform, ms/image | speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, images in variants.items():
        decode, full = best[name, "decode"], best[name, "full"]
        print(f"| {name} | {sum(map(len, images)) / size0:.3f}x | {1000 * decode / len(images):.3f} | "
              f"{best['original', 'decode'] / decode:.2f}x | {1000 * full / len(images):.3f} | "
              f"{best['original', 'full'] / full:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
