"""Micro-benchmark: RandomResizedCrop(224) + flip on ImageNet-like JPEGs, on one core.

Compares, in the same run and on the same bytes:
  pil         the usual PIL path (torchvision's): Image.open -> convert("RGB") -> crop -> resize -> flip
  tensorcom   tensorcom.images.train_transform(224, backend="pil"): crop chosen first, DCT-scaled
              libjpeg-turbo decode, crop cut out inside one antialiased bilinear Pillow resize
  tc+torch    the same with backend="torch": torch's uint8 AVX2 resize, torch on one thread (what
              images.init_worker() sets up in a loader worker process; "auto" then picks it)
  (region)    rows marked "region" decode only the crop's region (tensorcom._jpegcrop; needs a
              libturbojpeg 3, e.g. `pip install turbojpeg`); the others decode the whole image
  eval        tensorcom.images.eval_transform(224, 256) (fused resize + center crop)
  decode      a plain full-size simplejpeg decode (what decoding alone costs; no augmentation)

    ./run bench benchmarks/images.py [--count 64] [--rounds 7] [--width 500 --height 375]

Rounds are interleaved; the table shows the median img/s of each and the ratio to `pil`.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import numpy as np
from PIL import Image

from tensorcom import images
from tensorcom import _jpegcrop as tjcrop


def make_jpegs(count: int, width: int, height: int, seed: int = 0) -> list[bytes]:
    """`count` photo-like JPEGs (smooth colour fields plus noise, quality 90) of width x height."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        base = rng.random((height // 15 + 2, width // 20 + 2, 3)) * 255
        im = Image.fromarray(base.astype(np.uint8)).resize((width, height), Image.Resampling.BICUBIC)
        arr = np.asarray(im).astype(np.float32) + rng.normal(0, 18, (height, width, 3))
        buf = io.BytesIO()
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def pil_transform(size: int = 224):
    """The baseline: PIL decode + torchvision-style RandomResizedCrop + flip, -> HWC uint8."""
    crop = images.RandomResizedCrop(size)  # only its box sampler: the same crop distribution

    def transform(data: bytes, rng: np.random.Generator) -> np.ndarray:
        mirror = rng.random() < 0.5
        im = Image.open(io.BytesIO(data)).convert("RGB")
        im = im.crop(crop.box(*im.size, rng)).resize((size, size), Image.Resampling.BILINEAR)
        if mirror:
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return np.asarray(im)

    return transform


def decode_only(data: bytes, rng: np.random.Generator) -> np.ndarray:
    import simplejpeg

    return simplejpeg.decode_jpeg(data)


def measure(fn, jpegs: list[bytes], seed: int, region: bool = False) -> float:
    """Images per second of fn over all jpegs (one pass), with partial decoding on or off."""
    rng = np.random.default_rng(seed)
    previous = tjcrop.set_enabled(region)
    start = time.perf_counter()
    for data in jpegs:
        fn(data, rng)
    rate = len(jpegs) / (time.perf_counter() - start)
    tjcrop.set_enabled(previous)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--width", type=int, default=500)
    parser.add_argument("--height", type=int, default=375)
    args = parser.parse_args()
    jpegs = make_jpegs(args.count, args.width, args.height)
    variants = {"pil": pil_transform(), "tensorcom": images.train_transform(224, backend="pil"),
                "eval": images.eval_transform(224, 256, backend="pil"), "decode": decode_only}
    if images.init_worker():  # torch installed: one thread, as in a loader worker
        variants["tc+torch"] = images.train_transform(224, backend="torch")
        variants["eval+torch"] = images.eval_transform(224, 256, backend="torch")
    if tjcrop.available():
        for name in [n for n in variants if n.startswith(("tensorcom", "tc+"))]:
            variants[f"{name} region"] = variants[name]
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds):
        for name, fn in variants.items():
            rates[name].append(measure(fn, jpegs, r, region=name.endswith("region")))
    base = statistics.median(rates["pil"])
    print(f"{args.count} JPEGs {args.width}x{args.height} (~{np.mean([len(j) for j in jpegs]) / 1e3:.0f} kB), "
          f"RandomResizedCrop(224)+flip, one core, median of {args.rounds} rounds")
    print(f"| {'variant':<16} | {'img/s':>7} | {'ms/img':>6} | {'vs pil':>6} |")
    print(f"|{'-' * 18}|{'-' * 8}:|{'-' * 7}:|{'-' * 7}:|")
    for name, values in rates.items():
        rate = statistics.median(values)
        print(f"| {name:<16} | {rate:7.0f} | {1e3 / rate:6.2f} | {rate / base:5.2f}x |")


if __name__ == "__main__":
    main()
