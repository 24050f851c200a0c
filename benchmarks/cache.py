"""Decoded-image cache benchmark: epochs through Pipeline.cache against the uncached pipeline and
torch's DataLoader, in one run, on the ImageNet-like folder of benchmarks/pipeline.py.

Every setup makes the same RandomResizedCrop(224) + flip batches of 64 uint8 images with 2 worker
processes, for --epochs epochs, each epoch timed from the end of the one before (so worker start-up
and epoch boundaries count), its CPU the whole process tree's (benchmarks/_processes.tree_cpu):

  (a) torch DataLoader(num_workers=2, persistent_workers=True) + PIL (benchmarks/pipeline.PILFolder)
  (b) serve-imagenet-dir's dir_pipeline(workers=2), no cache: every epoch decodes every JPEG
  (c) dir_pipeline(workers=2, cache=DIR), DIR empty at the start: epoch 1 decodes and writes, the
      later ones map the decoded images from the cache's files
  (d) as (c) with cache_max_side=256

It prints a row per setup and epoch, the ratios against the targets (first epoch (c)/(b) >= 0.9;
later epochs (c)/(a) >= 5 and (c)/(b) >= 3), the CPU per image of each against the floor (the same
crop + resize + flip on images already decoded in memory, one thread), and the cache's bytes per image
at max_side 256, 320 and full size with what ImageNet's 1.28 M training images would need.

--components measures instead, in this one process (no workers, so nothing else's CPU counts), where
a first epoch through the cache spends its CPU against the uncached path: each path and each of its
parts on the same images, in interleaved rounds (median CPU-ms per image), and the ratio uncached /
miss that bounds the first epoch's CPU ratio.

    ./run bench benchmarks/cache.py --quick
    .venv/bin/python benchmarks/cache.py --components      # ~30 s
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _processes import tree_cpu  # noqa: E402
from pipeline import BATCH, SIZE, PILFolder, check_batch, image_files, make_dataset  # noqa: E402

IMAGENET_IMAGES = 1_281_167


def timed_epochs(name: str, epochs_of, count: int) -> list[dict]:
    """Run `epochs_of()` (an iterator of epochs, each an iterator of batches); one row per epoch with
    its wall time from the end of the previous epoch (the first from the start) and its tree CPU."""
    rows = []
    cpu, start = tree_cpu(), time.perf_counter()
    for number, batches in enumerate(epochs_of(), 1):
        images = sum(check_batch(images, labels) for images, labels in batches)
        now, cpu_now = time.perf_counter(), tree_cpu()
        rows.append({"name": name, "epoch": number, "images": images, "wall": now - start,
                     "rate": images / (now - start), "cpu_ms": 1000 * (cpu_now - cpu) / max(images, 1)})
        print(f"  {name}, epoch {number}: {images} images in {now - start:.2f} s, {rows[-1]['rate']:.0f} img/s, "
              f"{rows[-1]['cpu_ms']:.2f} CPU-ms per image", flush=True)
        if images != count:
            raise RuntimeError(f"{name} epoch {number}: {images} images, expected {count}")
        cpu, start = cpu_now, now
    return rows


def torch_epochs(root: Path, epochs: int):
    """(a): DataLoader epochs over PILFolder, its 2 workers kept between epochs."""
    from torch.utils.data import DataLoader

    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    loader = DataLoader(PILFolder(image_files(root)), batch_size=BATCH, shuffle=True, num_workers=2,
                        persistent_workers=True)
    for _ in range(epochs):
        yield ((images.numpy(), labels.numpy()) for images, labels in loader)
    del loader


def our_epochs(root: Path, epochs: int, **cache):
    """(b)-(d): serve-imagenet-dir's pipeline with 2 worker processes, epoch after epoch."""
    from tensorcom.images.imagenet import dir_pipeline

    pipeline = dir_pipeline(str(root / "train"), batch_size=BATCH, size=SIZE, workers=2, seed=0,
                            dedicated=True, **cache)
    for epoch in range(epochs):
        yield iter(pipeline.set_epoch(epoch))
    pipeline.close()


def floor_ms(root: Path, count: int = 64) -> float:
    """CPU-ms per image of the augmentation alone on images already decoded in memory (torch's resize
    on one thread, as in the workers): what no cache can take away."""
    from tensorcom.images import decode, init_worker, train_transform

    init_worker()
    images = [decode(Path(path).read_bytes()) for path, _ in image_files(root, count)]
    transform, rng = train_transform(SIZE), np.random.default_rng(0)
    start = time.process_time()
    for _ in range(3):
        for image in images:
            transform(image, rng)
    return 1000 * (time.process_time() - start) / (3 * len(images))


def bytes_per_image(root: Path, base: str, count: int) -> list[tuple[str, float]]:
    """(max_side label, cache bytes per image) for 256, 320 and full size, filling caches of `count` images."""
    from tensorcom.images.folder import ImageFolderSource
    from tensorcom.pipeline import Pipeline

    source = ImageFolderSource(str(root / "train"), read=False)
    result = []
    for side in (256, 320, None):
        directory = os.path.join(base, f"sizes-{side}")
        for _ in Pipeline(source).take(count).cache(directory, max_side=side):
            pass
        total = sum(entry.stat().st_size for entry in Path(directory).rglob("*.seg"))
        result.append((str(side or "full"), total / count))
    return result


def components(root: Path, count: int = 100, rounds: int = 7) -> dict[str, float]:
    """Median CPU-ms per image of the uncached augmentation, the cache's miss and hit, and their parts,
    on `count` images, each round on fresh images and a fresh cache directory."""
    from tensorcom import imagecodec
    from tensorcom.images import init_worker, train_transform
    from tensorcom.images.augment import RandomResizedCrop
    from tensorcom.images.decoded_cache import decode_bounded, decoded_cache
    from tensorcom.images.folder import ImageFolderSource
    from tensorcom.images.imagenet import Augment
    from tensorcom.pipeline.cache import EntryStore

    init_worker()
    source = ImageFolderSource(str(root / "train"), read=False)
    items, rng, transform = source.items(), np.random.default_rng(0), train_transform(SIZE)
    times: dict[str, list[float]] = {}
    for number in range(rounds):
        base = tempfile.mkdtemp(prefix="tensorcom-cache-parts-")
        samples = [{"__key__": os.path.basename(path), "__path__": path, "cls": label}
                   for path, label in items[number * count:(number + 1) * count]]
        datas = [Path(sample["__path__"]).read_bytes() for sample in samples]
        boxes = [RandomResizedCrop(SIZE).box(*imagecodec.image_size(data), rng) for data in datas]
        arrays = [decode_bounded(data, None) for data in datas]
        cached, store = Augment(SIZE, dedicated=True, cache=decoded_cache(source, base)), EntryStore(f"{base}/parts")
        plain = Augment(SIZE, dedicated=True)
        parts = {
            "uncached: Augment (read, region decode, crop + resize + flip)": lambda: [plain(s, rng) for s in samples],
            "  read the file": lambda: [Path(s["__path__"]).read_bytes() for s in samples],
            "  region decode (imagecodec.open_region)": lambda: [
                imagecodec.open_region(d, b, min(SIZE / (b[2] - b[0]), SIZE / (b[3] - b[1]))) for d, b in zip(datas, boxes)],
            "miss: Augment(cache=) (read, decode, store, crop + resize + flip)": lambda: [cached(s, rng) for s in samples],
            "  full decode (decode_bounded)": lambda: [decode_bounded(d, None).shape for d in datas],
            "  store the entry (EntryStore.save)": lambda: [store.save(s["__key__"], a) for s, a in zip(samples, arrays)],
            "  crop + resize + flip of the array": lambda: [transform(a, rng) for a in arrays],
            "hit: Augment(cache=) (map the entry, crop + resize + flip)": lambda: [cached(s, rng) for s in samples],
        }
        for name, part in parts.items():
            start = time.process_time()
            part()
            times.setdefault(name, []).append(1000 * (time.process_time() - start) / count)
        shutil.rmtree(base, ignore_errors=True)
    return {name: float(np.median(values)) for name, values in times.items()}


def report_components(parts: dict[str, float]) -> None:
    print("\n| part | CPU-ms per image (median of rounds) |\n|---|---:|")
    for name, value in parts.items():
        print(f"| {name} | {value:.3f} |")
    uncached, miss = (next(v for k, v in parts.items() if k.startswith(w)) for w in ("uncached", "miss"))
    print(f"\nuncached / miss = {uncached / miss:.2f} (the first epoch's CPU ratio, without collation and transfer); "
          "each part runs in a loop of its own, warmer than within a miss, so the parts add up to less")


def report(rows: list[dict], floor: float, sizes: list[tuple[str, float]]) -> None:
    """The markdown tables and the ratios against the targets."""
    print("\n| setup | epoch | img/s (from the end of the previous epoch) | CPU-ms per image | cores busy |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:  # cores busy: the tree's CPU over the wall time (2 = both cores of this machine)
        print(f"| {row['name']} | {row['epoch']} | {row['rate']:.0f} | {row['cpu_ms']:.2f} | "
              f"{row['rate'] * row['cpu_ms'] / 1000:.2f} |")
    by = {(row["name"][:3], row["epoch"]): row for row in rows}
    later = sorted({row["epoch"] for row in rows if row["epoch"] > 1})

    def mean_rate(setup: str) -> float:
        return float(np.mean([by[setup, e]["rate"] for e in later]))

    print(f"\nfirst epoch (c)/(b) = {by['(c)', 1]['rate'] / by['(b)', 1]['rate']:.2f} (target >= 0.9), "
          f"(d)/(b) = {by['(d)', 1]['rate'] / by['(b)', 1]['rate']:.2f}; "
          f"later epochs (mean): (c)/(a) = {mean_rate('(c)') / mean_rate('(a)'):.2f} (target >= 5), "
          f"(c)/(b) = {mean_rate('(c)') / mean_rate('(b)'):.2f} (target >= 3), "
          f"(d)/(a) = {mean_rate('(d)') / mean_rate('(a)'):.2f}, (d)/(b) = {mean_rate('(d)') / mean_rate('(b)'):.2f}")
    print(f"floor: {floor:.2f} CPU-ms per image for crop + resize + flip of an image already in memory")
    print("\n| max_side | cache bytes per image | ImageNet (1.28 M images) |\n|---|---:|---:|")
    for side, size in sizes:
        print(f"| {side} | {size / 1e3:.0f} KB | {size * IMAGENET_IMAGES / 1e9:.0f} GB |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (3 epochs)")
    parser.add_argument("--images", type=int, default=3000, help="images in the folder (default 3000, as pipeline.py)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per setup (default 5, quick 3)")
    parser.add_argument("--cache-dir", default=None, help="where the caches go (default: a temporary directory)")
    parser.add_argument("--components", action="store_true", help="the CPU of each part of a miss, in one process")
    args = parser.parse_args(argv)
    count = args.images
    epochs = args.epochs or (3 if args.quick else 5)
    root = make_dataset(count)
    if args.components:
        report_components(components(root))
        return 0
    base = tempfile.mkdtemp(prefix="tensorcom-cache-bench-", dir=args.cache_dir)
    print(f"{count} JPEGs of 500x375 in {root}; RandomResizedCrop({SIZE}) + flip, batch {BATCH}, uint8, "
          f"2 worker processes, {epochs} epochs; {os.cpu_count()} CPUs; caches in {base}", flush=True)
    try:
        rows = timed_epochs("(a) torch DataLoader(2) + PIL", lambda: torch_epochs(root, epochs), count)
        rows += timed_epochs("(b) dir_pipeline, no cache", lambda: our_epochs(root, epochs), count)
        rows += timed_epochs("(c) dir_pipeline, cache", lambda: our_epochs(root, epochs, cache=f"{base}/full"), count)
        rows += timed_epochs("(d) dir_pipeline, cache, max_side 256",
                             lambda: our_epochs(root, epochs, cache=f"{base}/256", cache_max_side=256), count)
        report(rows, floor_ms(root), bytes_per_image(root, base, min(count, 100)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
