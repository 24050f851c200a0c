"""Image pipeline benchmark: PyTorch DataLoader vs tensorcom's pipeline vs serve-imagenet-dir.

On one ImageFolder of ImageNet-like JPEGs (about 500x375, ~100 KB, made once under bench-data/), with
RandomResizedCrop(224) + horizontal flip, batch 64, uint8 output, in one run:

  (a) torch DataLoader, num_workers=2, with a PIL implementation of the transform (torchvision's way)
  (b) tensorcom.Pipeline in this process with 2 worker processes (serve-imagenet-dir's dir_pipeline with
      workers=2: `.map(augment).batch(64).parallel(2, init=images.init_worker)`, so each process reads,
      augments and batches its portion and hands over whole batches)
  (c) serve-imagenet-dir (a real subprocess, 2 publishers) -> tensorcom.Connection over loopback

and prints img/s (counted from the first batch on, so start-up is left out; best of --repeats
interleaved runs), CPU-seconds per 1,000 images (this process + its reaped children, start-up
included) and the ratios (b)/(a) and (c)/(b). Before those, (d): serve-imagenet-dir -w 0 and -w 2
serving --epochs epochs back to back to a Connection, each epoch counted whole (from the end of the
epoch before, boundary included) with the gap before its first batch. Then a threads x processes grid for the same images
fetched over HTTP from a local server (a subprocess whose CPU time is not counted).

    ./run bench benchmarks/pipeline.py            # full run (a few minutes)
    ./run bench benchmarks/pipeline.py --quick    # a short run
    ./run bench benchmarks/pipeline.py --quick --epochs-only   # (d) alone
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import os
import random
import resource
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Iterator

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench-data"
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
    image += np.repeat(np.repeat(texture, 4, 0), 4, 1)[:height, :width] * 18
    image += rng.normal(0, 5, (height, width, 3)).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def make_dataset(count: int) -> Path:
    """Write `count` JPEGs into bench-data/imagenet-like-COUNT/train/<class>/ (once); returns that root."""
    import simplejpeg

    root = DATA / f"imagenet-like-{count}"
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


def image_files(root: Path, limit: int | None = None) -> list[tuple[str, int]]:
    """(path, label) pairs of the first `limit` images (all when None), classes in sorted order."""
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    pairs = [(str(p), label) for label, name in enumerate(classes) for p in sorted((root / "train" / name).glob("*.jpg"))]
    return sorted(pairs, key=lambda pair: Path(pair[0]).name)[:limit]


# ---------------------------------------------------------------- measuring


def cpu_seconds() -> float:
    """User + system CPU seconds of this process plus its reaped descendants."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


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
    w, h = fallback_crop(width, height, ratio)
    left, top = (width - w) // 2, (height - h) // 2
    return image.resize((size, size), Image.BILINEAR, box=(left, top, left + w, top + h))


def fallback_crop(width: int, height: int, ratio: tuple[float, float]) -> tuple[int, int]:
    """(w, h) of torchvision's fallback: the whole image with its aspect ratio clamped into `ratio`."""
    aspect = width / height
    if aspect < ratio[0]:
        return width, min(height, int(round(width / ratio[0])))
    if aspect > ratio[1]:
        return min(width, int(round(height * ratio[1]))), height
    return width, height


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


def run_dataloader(root: Path, timer: "Timer") -> int:
    """(a): one pass of DataLoader(num_workers=2, shuffle) over PILFolder; returns images seen."""
    from torch.utils.data import DataLoader

    loader = DataLoader(PILFolder(image_files(root)), batch_size=BATCH, shuffle=True, num_workers=2)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    iterator = iter(loader)
    for images, labels in iterator:
        timer.tick(check_batch(images.numpy(), labels.numpy()))
    del iterator, loader  # exhausted: its workers are joined (and so counted in RUSAGE_CHILDREN)
    return timer.images


# ---------------------------------------------------------------- (b) tensorcom pipeline


def run_pipeline(root: Path, timer: "Timer") -> int:
    """(b): serve-imagenet-dir's pipeline iterated in this process; 2 processes augment and batch."""
    from tensorcom.images.imagenet import dir_pipeline

    pipeline = dir_pipeline(str(root / "train"), batch_size=BATCH, size=SIZE, workers=2, seed=0)
    for images, labels in pipeline:
        timer.tick(check_batch(images, labels))
    return timer.images


# ---------------------------------------------------------------- (c) server -> Connection


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_served(root: Path, timer: "Timer") -> int:
    """(c): serve-imagenet-dir -P 2 (a subprocess) -> zpush -> a Connection binding zpull here."""
    from tensorcom import Connection

    port = free_port()
    command = [sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", "-d", str(root), "-b", str(BATCH),
               "--size", str(SIZE), "-P", "2", "--epochs", "1", "-r", "0", f"zpush://127.0.0.1:{port}"]
    with Connection(f"zpull://127.0.0.1:{port}", timeout=120) as conn:
        server = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        try:
            for images, labels in conn:
                timer.tick(check_batch(images, labels))
            server.wait(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    return timer.images


# ---------------------------------------------------------------- (d) epochs back to back, boundaries included


def run_epochs(root: Path, workers: int, epochs: int) -> list[dict]:
    """serve-imagenet-dir -w WORKERS --epochs EPOCHS (a subprocess, one publisher) -> Connection: for
    each epoch, the gap before its first batch (from the end of the epoch before; from the server's
    start for the first) and its images per second counted whole, from that end to its last batch."""
    from tensorcom import Connection

    port = free_port()
    command = [sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", "-d", str(root), "-b", str(BATCH),
               "--size", str(SIZE), "-w", str(workers), "--epochs", str(epochs), "-r", "0",
               f"zpush://127.0.0.1:{port}"]
    rows: list[dict] = []
    with Connection(f"zpull://127.0.0.1:{port}", timeout=120) as conn:
        end = time.perf_counter()
        server = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        try:
            for epoch in range(epochs):
                images, first = 0, None
                for batch, labels in conn:
                    first = first or time.perf_counter()
                    images += check_batch(batch, labels)
                start, end = end, time.perf_counter()
                rows.append({"epoch": epoch, "gap": (first or end) - start, "images": images,
                             "rate": images / (end - start)})
            server.wait(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    return rows


def epochs_report(root: Path, workers: list[int], epochs: int) -> str:
    """The per-epoch gaps and whole-epoch rates of run_epochs for each -w in `workers`, as a table."""
    lines = ["| serve-imagenet-dir | epoch | gap before its first batch (s) | images | img/s, whole epoch |",
             "|---|---:|---:|---:|---:|"]
    for count in workers:
        for row in run_epochs(root, count, epochs):
            print(f"  -w {count} epoch {row['epoch']}: gap {row['gap']:.2f} s before the first batch, "
                  f"{row['images']} images at {row['rate']:.0f} img/s counted whole", flush=True)
            lines.append(f"| -w {count} | {row['epoch']} | {row['gap']:.2f} | {row['images']} | {row['rate']:.0f} |")
    return "\n".join(lines)


class Timer:
    """Counts images and times from the first batch on (start-up excluded from the rate)."""

    def __init__(self):
        self.images = 0
        self.first: float | None = None
        self.first_images = 0
        self.last = 0.0

    def tick(self, images: int) -> None:
        """Record a batch of `images` that has just arrived."""
        now = time.perf_counter()
        if self.first is None:
            self.first, self.first_images = now, images
        self.images += images
        self.last = now

    def rate(self) -> float:
        """Images per second after the first batch."""
        span = self.last - (self.first or self.last)
        return (self.images - self.first_images) / span if span > 0 else float("nan")


def measure(name: str, run, *args) -> dict:
    """Run `run(*args, timer)` (children reaped when it returns); rate and CPU-seconds per 1,000 images."""
    timer = Timer()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    images = run(*args, timer)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    result = {"name": name, "images": images, "wall": wall, "rate": timer.rate(), "cpu_per_k": 1000 * cpu / max(images, 1)}
    print(f"  {name}: {images} images, {wall:.1f} s in all, {result['rate']:.0f} img/s after the first batch, "
          f"{result['cpu_per_k']:.2f} CPU-s per 1k images", flush=True)
    return result


# ---------------------------------------------------------------- HTTP threads x processes grid


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Static files, HTTP/1.1 keep-alive, no request log lines."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass


def serve_http(directory: str, port: int) -> None:
    """Serve `directory` on 127.0.0.1:`port` with a thread per connection and a deep listen backlog
    (http.server's default backlog of 5 stalls 16 concurrent clients in SYN retries)."""

    class Server(http.server.ThreadingHTTPServer):
        request_queue_size = 256

    handler = functools.partial(QuietHandler, directory=directory)
    with Server(("127.0.0.1", port), handler) as server:
        server.serve_forever()


@contextlib.contextmanager
def http_server(directory: Path) -> Iterator[str]:
    """Run serve_http(directory) in a subprocess; yields the base URL once it answers."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve-http", str(directory), str(port)])
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield base
    finally:
        proc.kill()
        proc.wait()


class LabelledAugment:
    """Picklable map: a fetched sample {"__url__", "jpg"} -> (image, label from the class directory)."""

    def __init__(self, classes: list[str]):
        from tensorcom.images.imagenet import Augment

        self.classes = {name: i for i, name in enumerate(classes)}
        self.augment = Augment(SIZE)

    def __call__(self, sample: dict, rng):
        label = self.classes[sample["__url__"].rsplit("/", 2)[1]]
        return self.augment({"jpg": sample["jpg"], "cls": label}, rng)


def run_http(base: str, root: Path, threads: int, processes: int, limit: int, timer: "Timer") -> int:
    """`limit` images fetched over HTTP by `threads` threads, augmented and batched by 64 (0 processes:
    in this process; else in each of `processes` processes, each fetching its portion with `threads`
    threads and handing over whole batches)."""
    from tensorcom.images import init_worker
    from tensorcom.images.imagenet import collate_pair
    from tensorcom.pipeline import Pipeline
    from tensorcom.pipeline.sources import FetchSource

    pairs = image_files(root, limit)
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    urls = [f"{base}/train/{Path(path).parent.name}/{Path(path).name}" for path, _ in pairs]
    pipeline = Pipeline(FetchSource(urls, threads=threads), seed=0).map(LabelledAugment(classes), rng=True)
    pipeline = pipeline.batch(BATCH, collate=collate_pair)
    if processes:
        pipeline = pipeline.parallel(processes, init=init_worker)
    for images, labels in pipeline:
        timer.tick(check_batch(images, labels))
    return timer.images


# ---------------------------------------------------------------- the run


def table(rows: list[dict], baseline: dict) -> str:
    """A markdown table of measured rows."""
    lines = ["| pipeline | images | img/s (best run) | CPU-s per 1k images | img/s vs (a) |", "|---|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['name']} | {row['images']} | {row['rate']:.0f} | {row['cpu_per_k']:.2f} | "
                     f"{row['rate'] / baseline['rate']:.2f}x |")
    return "\n".join(lines)


def grid(root: Path, threads: list[int], processes: list[int], limit: int) -> str:
    """The HTTP threads x processes grid as a markdown table of img/s."""
    results: dict[tuple[int, int], float] = {}
    with http_server(root) as base:
        for p in processes:
            for t in threads:
                results[t, p] = measure(f"HTTP, {t} threads, {p} processes", run_http, base, root, t, p, limit)["rate"]
    head = "| download threads \\ decode processes | " + " | ".join(str(p) for p in processes) + " |"
    lines = [head, "|---" * (len(processes) + 1) + "|"]
    lines += [f"| {t} | " + " | ".join(f"{results[t, p]:.0f}" for p in processes) + " |" for t in threads]
    return "\n".join(lines)


def compare(root: Path, repeats: int) -> tuple[dict, dict, dict]:
    """Results of (a), (b), (c): `repeats` interleaved rounds (the machine's load drifts), best kept."""
    runs = [("(a) torch DataLoader, 2 workers, PIL", run_dataloader),
            ("(b) tensorcom Pipeline, 2 processes", run_pipeline),
            ("(c) serve-imagenet-dir -P 2 -> Connection", run_served)]
    best: dict[str, dict] = {}
    for _ in range(repeats):
        for name, run in runs:
            result = measure(name, run, root)
            if name not in best or result["rate"] > best[name]["rate"]:
                best[name] = result
    return tuple(best[name] for name, _ in runs)  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (fewer images)")
    parser.add_argument("--images", type=int, default=None, help="images in the folder (default 3000, quick 640)")
    parser.add_argument("--repeats", type=int, default=None, help="runs of (a), (b), (c), best kept (default 2, quick 1)")
    parser.add_argument("--skip-grid", action="store_true", help="leave out the HTTP grid")
    parser.add_argument("--epochs", type=int, default=3, help="epochs served back to back in (d) (default 3; 0: no (d))")
    parser.add_argument("--epoch-workers", default="0,2", help="the -w values of (d), comma-separated (default 0,2)")
    parser.add_argument("--epochs-only", action="store_true", help="only (d): epochs back to back, boundaries included")
    parser.add_argument("--serve-http", nargs=2, metavar=("DIR", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_http:
        serve_http(args.serve_http[0], int(args.serve_http[1]))
        return 0
    count = args.images or (640 if args.quick else 3000)
    args.repeats = args.repeats or (1 if args.quick else 2)
    root = make_dataset(count)
    sizes = [p.stat().st_size for p in list((root / "train").glob("*/*.jpg"))[:200]]
    print(f"{count} JPEGs of 500x375 in {root}, {np.mean(sizes) / 1000:.0f} KB on average; "
          f"RandomResizedCrop({SIZE}) + flip, batch {BATCH}, uint8; {os.cpu_count()} CPUs", flush=True)
    if args.epochs:
        print(f"\n(d) serve-imagenet-dir, {args.epochs} epochs back to back, every epoch counted whole:", flush=True)
        print("\n" + epochs_report(root, [int(w) for w in args.epoch_workers.split(",")], args.epochs) + "\n")
    if args.epochs_only:
        return 0
    a, b, c = compare(root, args.repeats)
    print()
    print(table([a, b, c], a))
    print(f"\n(b)/(a) = {b['rate'] / a['rate']:.2f} (target >= 2.0)   (c)/(b) = {c['rate'] / b['rate']:.2f} (target >= 0.9)")
    if not args.skip_grid:
        limit = 256 if args.quick else 1024
        print(f"\nimages fetched from a local http.server, {limit} per cell, img/s:\n", flush=True)
        print(grid(root, [1, 4] if args.quick else [1, 4, 16], [0, 2] if args.quick else [0, 1, 2], limit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
