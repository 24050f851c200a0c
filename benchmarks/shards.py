"""Shard reading speed by tar writer: tensorcom vs webdataset 1.0.2 vs `cat`, on the same shards.

    ./run bench benchmarks/shards.py [--writers webdataset,gnutar,bsdtar,tensorcom]
                                     [--shards 10] [--per-shard 2000] [--decode-shards 2]
                                     [--repeats 3] [--wds-repeats 1]

One logical dataset (--shards × --per-shard samples of a ~15 KB 256×256 JPEG (noise + gradients,
quality 85) + cls + json) is written by each of four writers and cached under
bench-data/shards/<writer>/<shards>x<per-shard>/:

    webdataset  webdataset.TarWriter with its defaults: pax format with a float mtime, so a pax
                extended header ('x') before every member (what WebDataset users' shards look like)
    gnutar      our shards extracted and repacked in the same member order by `tar --format=gnu`
    bsdtar      the same with bsdtar's default format (restricted pax); when `bsdtar` is not on PATH
                (Debian: libarchive-tools) its row says "not installed"
    tensorcom   our ShardWriter

For each writer's shards, in one process and after a warm-up read (so every reader reads from the page
cache), it measures raw reading (no decode) as samples/s and MB/s: tensorcom with its C tar scanner,
tensorcom pure Python (TENSORCOM_PURE_PYTHON=1), webdataset, `cat FILES | wc -c` and, for reference,
`cat FILES > /dev/null`. It prints one table per writer, a summary with the ratios against the targets
(tensorcom / webdataset >= 20x samples/s; tensorcom / (cat | wc -c) >= 0.5x MB/s), and a small table
decoding JPEGs to rgb8 in one process with both libraries on the first --decode-shards of our shards.
Every reader must return every sample; a count that differs raises.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import webdataset as wds  # imported here: its import (torch's) would otherwise count in its first timing

from tensorcom import ShardDataset, shards
from tensorcom.shards import _tarscan as tarscan

ROOT = Path(__file__).resolve().parent.parent / "bench-data" / "shards"
NAME = "bench-%06d.tar"
WRITERS = ("webdataset", "gnutar", "bsdtar", "tensorcom")
DESCRIPTIONS = {
    "webdataset": "webdataset.TarWriter: pax, float mtime, an 'x' header before every member",
    "gnutar": "GNU tar --format=gnu, repacking our shards' members in order",
    "bsdtar": "bsdtar (default format: restricted pax), repacking our shards' members in order",
    "tensorcom": "tensorcom ShardWriter",
}
TOOLS = {"gnutar": "tar", "bsdtar": "bsdtar"}
RAW_READERS = ("tensorcom raw", "tensorcom raw, pure Python", "webdataset raw")


def make_jpegs(count: int, seed: int = 0) -> list[bytes]:
    """`count` distinct 256×256 JPEGs of about 15 KB: smooth gradients, blobs and mild noise."""
    import PIL.Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:256, 0:256].astype(np.float32) / 255.0
    result = []
    for _ in range(count):
        a, b, c = rng.uniform(0.2, 3.0, 3)
        base = np.stack([np.sin(a * 6 * x + b), np.cos(b * 5 * y + c), np.sin(c * 4 * (x + y))], axis=-1)
        noise = rng.normal(0, 0.035, (256, 256, 3))
        image = np.clip((base * 0.5 + 0.5 + noise) * 255, 0, 255).astype(np.uint8)
        out = io.BytesIO()
        PIL.Image.fromarray(image).save(out, format="JPEG", quality=85)
        result.append(out.getvalue())
    return result


def dataset(nshards: int, per_shard: int) -> Iterator[list[dict]]:
    """The logical dataset, one list of samples {"__key__", "jpg", "cls", "json"} (all bytes) a shard."""
    jpegs = make_jpegs(256)
    print(f"# samples: mean JPEG {np.mean([len(j) for j in jpegs]):.0f} B", flush=True)
    for shard in range(nshards):
        yield [{"__key__": f"{i:08d}", "jpg": jpegs[i % len(jpegs)], "cls": b"%d" % (i % 1000),
                "json": json.dumps({"index": i, "label": i % 1000, "source": "synthetic"}).encode()}
               for i in range(shard * per_shard, (shard + 1) * per_shard)]


def write_tensorcom(directory: Path, nshards: int, per_shard: int) -> None:
    """The dataset as shards bench-NNNNNN.tar in `directory`, by our ShardWriter."""
    with shards.ShardWriter(str(directory / NAME), maxcount=per_shard) as writer:
        for samples in dataset(nshards, per_shard):
            for sample in samples:
                writer.write(sample)


def write_webdataset(directory: Path, nshards: int, per_shard: int) -> None:
    """The same with webdataset.TarWriter, one writer a shard, its defaults otherwise."""
    for number, samples in enumerate(dataset(nshards, per_shard)):
        with wds.TarWriter(str(directory / (NAME % number))) as writer:
            for sample in samples:
                writer.write(sample)


def repacker(command: list[str]) -> Callable[[Path, int, int], None]:
    """A writer that extracts each of our shards and archives its members again, in the same order,
    with `command` (a tar's create options up to the file list)."""
    def write(directory: Path, nshards: int, per_shard: int) -> None:
        for url in shard_urls("tensorcom", nshards, per_shard):
            with tempfile.TemporaryDirectory(dir=directory) as tree:
                listing = subprocess.run(["tar", "-tf", url], capture_output=True, check=True).stdout
                Path(tree, ".members").write_bytes(listing)
                subprocess.run(["tar", "-xf", url, "-C", tree, "--no-same-owner"], check=True)
                out = directory / Path(url).name
                subprocess.run([*command, "-f", str(out), "-T", ".members"], cwd=tree, check=True)
    return write


WRITE = {
    "webdataset": write_webdataset,
    "gnutar": repacker(["tar", "-c", "--format=gnu", "--no-recursion"]),
    "bsdtar": repacker(["bsdtar", "-c", "-n"]),
    "tensorcom": write_tensorcom,
}


def shard_urls(writer: str, nshards: int, per_shard: int) -> list[str]:
    """The paths of `writer`'s shards, written (into a temporary folder, then renamed) unless cached."""
    directory = ROOT / writer / f"{nshards}x{per_shard}"
    urls = [str(directory / (NAME % i)) for i in range(nshards)]
    if directory.is_dir():
        return urls
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    print(f"# writing {nshards} shards with {writer} to {directory}", flush=True)
    WRITE[writer](partial, nshards, per_shard)
    partial.rename(directory)
    return urls


def timed(function) -> tuple[float, int, float]:
    """(wall seconds, function's result, CPU seconds of this process)."""
    start, cpu = time.perf_counter(), time.process_time()
    count = function()
    return time.perf_counter() - start, count, time.process_time() - cpu


def best_of(function, urls, repeats: int) -> tuple[float, int, float]:
    """The fastest of `repeats` runs (wall time), with its count and CPU time."""
    return min(timed(lambda: function(urls)) for _ in range(repeats))


@contextlib.contextmanager
def pure_python(enabled: bool):
    """$TENSORCOM_PURE_PYTHON set to 1 (enabled) or unset (the C scanner when built) inside the block."""
    saved = os.environ.pop("TENSORCOM_PURE_PYTHON", None)
    if enabled:
        os.environ["TENSORCOM_PURE_PYTHON"] = "1"
    try:
        yield
    finally:
        os.environ.pop("TENSORCOM_PURE_PYTHON", None)
        if saved is not None:
            os.environ["TENSORCOM_PURE_PYTHON"] = saved


def read_ours(urls: list[str], pure: bool = False) -> int:
    with pure_python(pure):
        return sum(1 for _ in shards.samples(urls, rank=0, world_size=1))


def read_wds(urls: list[str]) -> int:
    return sum(1 for _ in wds.WebDataset(urls, shardshuffle=False, empty_check=False))


def decode_ours(urls: list[str]) -> int:
    with pure_python(False):
        dataset = ShardDataset(urls, decode="rgb8", rank=0, world_size=1)
        return sum(sample["jpg"].shape[0] == 256 for sample in dataset)


def decode_wds(urls: list[str]) -> int:
    dataset = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("rgb8")
    return sum(sample["jpg"].shape[0] == 256 for sample in dataset)


def read_cat(urls: list[str]) -> int:
    """`cat FILES > /dev/null`: GNU cat may hand the copy to the kernel (copy_file_range/splice), so
    this can be far faster than any reader that looks at the bytes."""
    subprocess.run(["cat", *urls], stdout=subprocess.DEVNULL, check=True)
    return 0


def read_cat_pipe(urls: list[str]) -> int:
    """`cat FILES | wc -c`: every byte crosses a pipe into a reading process; returns the byte count."""
    out = subprocess.run(["sh", "-c", 'cat "$@" | wc -c', "sh", *urls], capture_output=True, check=True)
    return int(out.stdout)


Rates = dict[str, tuple[float, float, "float | None"]]  # reader -> (samples/s, MB/s, samples/CPU s)


def check_count(writer: str, reader: str, count: int, expected: int) -> None:
    """Raise RuntimeError unless `reader` saw `expected` samples (or bytes) of `writer`'s shards."""
    if count != expected:
        raise RuntimeError(f"{reader} read {count:,} of {expected:,} on the {writer} shards")


def measure_writer(writer: str, urls: list[str], n: int, args) -> Rates:
    """Raw reading rates of every reader on one writer's shards (page cache warmed first)."""
    size = sum(os.path.getsize(u) for u in urls)
    read_cat(urls)  # warm the page cache
    seconds = best_of(read_cat, urls, args.repeats)[0]
    rows: Rates = {"cat > /dev/null": (n / seconds, size / 1e6 / seconds, None)}
    seconds, count, _ = best_of(read_cat_pipe, urls, args.repeats)
    check_count(writer, "cat | wc -c", count, size)
    rows["cat | wc -c"] = (n / seconds, size / 1e6 / seconds, None)
    readers = (lambda u: read_ours(u), lambda u: read_ours(u, pure=True), read_wds)
    for name, function in zip(RAW_READERS, readers):
        repeats = args.wds_repeats if name.startswith("webdataset") else args.repeats
        seconds, count, cpu = best_of(function, urls, repeats)
        check_count(writer, name, count, n)
        rows[name] = (n / seconds, size / 1e6 / seconds, n / cpu)
    return rows


def measure_decode(urls: list[str], per_shard: int) -> Rates:
    """rgb8 decode rates of both libraries on `urls` (our shards)."""
    n, size = len(urls) * per_shard, sum(os.path.getsize(u) for u in urls)
    rows: Rates = {}
    for name, function in (("tensorcom rgb8", decode_ours), ("webdataset rgb8", decode_wds)):
        seconds, count, cpu = timed(lambda: function(urls))
        check_count("tensorcom", name, count, n)
        rows[name] = (n / seconds, size / 1e6 / seconds, n / cpu)
    return rows


def print_rates(title: str, rows: Rates) -> None:
    print(f"\n{title}\n| reader | samples/s | MB/s | samples per CPU second |\n|---|---:|---:|---:|")
    for name, (rate, mbps, cpu_rate) in rows.items():
        cpu = "-" if cpu_rate is None else f"{cpu_rate:,.0f}"
        print(f"| {name.replace('|', chr(92) + '|')} | {rate:,.0f} | {mbps:,.0f} | {cpu} |")


def print_summary(results: dict[str, Rates | None]) -> None:
    """One row per writer: the ratios against their targets (wall clock; CPU time in parentheses)."""
    print("\n| writer | tensorcom / webdataset, samples/s | tensorcom / (cat \\| wc -c), MB/s | "
          "pure Python / webdataset, samples/s | pure Python / tensorcom |\n|---|---:|---:|---:|---:|")
    for writer, rows in results.items():
        if rows is None:
            print(f"| {writer} | not installed | - | - | - |")
            continue
        ours, pure, theirs = (rows[name] for name in RAW_READERS)
        print(f"| {writer} | {ours[0] / theirs[0]:.1f}x ({ours[2] / theirs[2]:.1f}x) | "
              f"{ours[1] / rows['cat | wc -c'][1]:.2f}x | {pure[0] / theirs[0]:.1f}x ({pure[2] / theirs[2]:.1f}x) | "
              f"{pure[0] / ours[0]:.2f}x |")
    print("| target | >= 20x | >= 0.5x | - | - |")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", default=",".join(WRITERS),
                        help=f"comma-separated, from {', '.join(WRITERS)} (default: all)")
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--per-shard", type=int, default=2000)
    parser.add_argument("--decode-shards", type=int, default=2, help="our shards decoded per library")
    parser.add_argument("--repeats", type=int, default=3, help="best of N for cat and tensorcom raw")
    parser.add_argument("--wds-repeats", type=int, default=1, help="best of N for webdataset raw")
    args = parser.parse_args()
    args.writers = [w.strip() for w in args.writers.split(",") if w.strip()]
    unknown = sorted(set(args.writers) - set(WRITERS))
    if unknown or not args.writers:
        parser.error(f"--writers takes names from {', '.join(WRITERS)}, got {args.writers}")
    if min(args.shards, args.per_shard, args.repeats, args.wds_repeats) < 1 or args.decode_shards < 0:
        parser.error("--shards, --per-shard, --repeats and --wds-repeats must be >= 1, --decode-shards >= 0")
    return args


def main() -> None:
    args = parse_args()
    n = args.shards * args.per_shard
    print(f"{args.shards} shards x {args.per_shard} samples; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores; C tar scanner {'built' if tarscan.scan_c is not None else 'NOT built'}")
    missing = [w for w in args.writers if w in TOOLS and shutil.which(TOOLS[w]) is None]
    written = {w: shard_urls(w, args.shards, args.per_shard) for w in args.writers if w not in missing}
    results: dict[str, Rates | None] = dict.fromkeys(args.writers)
    for writer, urls in written.items():
        results[writer] = measure_writer(writer, urls, n, args)
        size = sum(os.path.getsize(u) for u in urls) / 1e6
        print_rates(f"### {writer}: {DESCRIPTIONS[writer]} ({size:.0f} MB)", results[writer])
    print_summary(results)
    if args.decode_shards:
        subset = shard_urls("tensorcom", args.shards, args.per_shard)[: args.decode_shards]
        rows = measure_decode(subset, args.per_shard)
        print_rates(f"### rgb8 decode in one process, {len(subset)} of our shards", rows)
        ours, theirs = rows["tensorcom rgb8"], rows["webdataset rgb8"]
        print(f"\nrgb8 samples/s, tensorcom / webdataset: {ours[0] / theirs[0]:.2f}x wall clock, "
              f"{ours[2] / theirs[2]:.2f}x CPU time (target >= 1x)")


if __name__ == "__main__":
    main()
