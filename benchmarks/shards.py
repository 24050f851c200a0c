"""Shard reading speed: tensorcom vs webdataset 1.0.2 vs `cat`, on the same shards, in one run.

    ./run bench benchmarks/shards.py [--shards 10] [--per-shard 2000] [--decode-shards 2]

Makes (once, cached under bench-data/shards/) 10 shards × 2000 samples of a ~15 KB 256×256 JPEG
(noise + gradients, quality 85) + cls + json with our ShardWriter, then measures in one process:
raw reading (no decode) as samples/s and MB/s for tensorcom (with its C tar scanner when built, and
with the pure-Python scanner, TENSORCOM_PURE_PYTHON=1), webdataset and `cat FILES > /dev/null` (after
a warm-up read, so all of them read from the page cache), then decoding JPEGs to rgb8 in one process
for both libraries on the first --decode-shards shards. Prints a table with the ratios.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tensorcom import shards, tarscan

ROOT = Path(__file__).resolve().parent.parent / "bench-data" / "shards"


def make_jpegs(count: int, seed: int = 0) -> list[bytes]:
    """`count` distinct 256×256 JPEGs of about 15 KB: smooth gradients, blobs and mild noise."""
    import PIL.Image
    import io

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


def ensure_shards(nshards: int, per_shard: int) -> list[str]:
    """The shard paths, written with our ShardWriter unless already cached."""
    directory = ROOT / f"{nshards}x{per_shard}"
    urls = [str(directory / f"bench-{i:06d}.tar") for i in range(nshards)]
    if all(os.path.exists(u) for u in urls):
        return urls
    directory.mkdir(parents=True, exist_ok=True)
    jpegs = make_jpegs(256)
    print(f"# writing {nshards} shards to {directory} (mean JPEG {np.mean([len(j) for j in jpegs]):.0f} B)")
    with shards.ShardWriter(str(directory / "bench-%06d.tar"), maxcount=per_shard) as writer:
        for i in range(nshards * per_shard):
            writer.write({"__key__": f"{i:08d}", "jpg": jpegs[i % len(jpegs)], "cls": i % 1000,
                          "json": {"index": i, "label": i % 1000, "source": "synthetic"}})
    return urls


def timed(function) -> tuple[float, int, float]:
    """(wall seconds, function's result, CPU seconds of this process)."""
    start, cpu = time.perf_counter(), time.process_time()
    count = function()
    return time.perf_counter() - start, count, time.process_time() - cpu


def read_ours(urls):
    return sum(1 for _ in shards.samples(urls, rank=0, world_size=1))


def read_ours_python(urls):
    """read_ours with the pure-Python tar scanner (what an install without a C compiler runs)."""
    os.environ["TENSORCOM_PURE_PYTHON"] = "1"
    try:
        return read_ours(urls)
    finally:
        del os.environ["TENSORCOM_PURE_PYTHON"]


def read_wds(urls):
    import webdataset as wds

    return sum(1 for _ in wds.WebDataset(urls, shardshuffle=False, empty_check=False))


def decode_ours(urls):
    count = 0
    for sample in shards.ShardDataset(urls, decode="rgb8", rank=0, world_size=1):
        count += sample["jpg"].shape[0] == 256
    return count


def decode_wds(urls):
    import webdataset as wds

    dataset = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("rgb8")
    return sum(sample["jpg"].shape[0] == 256 for sample in dataset)


def read_cat(urls):
    """`cat FILES > /dev/null`: GNU cat may hand the copy to the kernel (copy_file_range/splice), so
    this can be far faster than any reader that looks at the bytes."""
    subprocess.run(["cat", *urls], stdout=subprocess.DEVNULL, check=True)
    return 0


def read_cat_pipe(urls):
    """`cat FILES | wc -c`: every byte crosses a pipe into a reading process."""
    out = subprocess.run(["sh", "-c", 'cat "$@" | wc -c', "sh", *urls], capture_output=True, check=True)
    assert int(out.stdout) == sum(os.path.getsize(u) for u in urls)
    return 0


def best_of(function, urls, repeats: int) -> tuple[float, int, float]:
    """The fastest of `repeats` runs (wall time), with its CPU time."""
    runs = [timed(lambda: function(urls)) for _ in range(repeats)]
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--per-shard", type=int, default=2000)
    parser.add_argument("--decode-shards", type=int, default=2, help="shards decoded per library")
    parser.add_argument("--repeats", type=int, default=3, help="best of N for cat and tensorcom raw")
    parser.add_argument("--wds-repeats", type=int, default=1, help="best of N for webdataset raw")
    args = parser.parse_args()
    urls = ensure_shards(args.shards, args.per_shard)
    total_mb = sum(os.path.getsize(u) for u in urls) / 1e6
    n = args.shards * args.per_shard
    read_cat(urls)  # warm the page cache
    rows = {}  # name -> (samples/s wall, MB/s wall, samples/s per CPU second or None)
    for name, function in (("cat > /dev/null", read_cat), ("cat | wc -c", read_cat_pipe)):
        seconds, _, _ = best_of(function, urls, args.repeats)
        rows[name] = (n / seconds, total_mb / seconds, None)
    for name, function, repeats in (("tensorcom raw", read_ours, args.repeats),
                                    ("tensorcom raw, pure Python", read_ours_python, args.repeats),
                                    ("webdataset raw", read_wds, args.wds_repeats)):
        seconds, count, cpu = best_of(function, urls, repeats)
        assert count == n, count
        rows[name] = (n / seconds, total_mb / seconds, n / cpu)
    subset = urls[: args.decode_shards]
    m = args.decode_shards * args.per_shard
    sub_mb = sum(os.path.getsize(u) for u in subset) / 1e6
    for name, function in (("tensorcom rgb8", decode_ours), ("webdataset rgb8", decode_wds)):
        seconds, count, cpu = timed(lambda: function(subset))
        assert count == m, count
        rows[name] = (m / seconds, sub_mb / seconds, m / cpu)
    report(rows, args, total_mb)


def report(rows: dict[str, tuple[float, float, float | None]], args, total_mb: float) -> None:
    """Print the table of rates and the table of ratios against the targets."""
    print(f"\n{args.shards} shards x {args.per_shard} samples, {total_mb:.0f} MB; "
          f"rgb8 on {args.decode_shards} shards; python {sys.version.split()[0]}, {os.cpu_count()} cores; "
          f"C tar scanner {'built' if tarscan.scan_c is not None else 'NOT built'}")
    print("| reader | samples/s | MB/s | samples per CPU second |\n|---|---:|---:|---:|")
    for name, (rate, mbps, cpu_rate) in rows.items():
        print(f"| {name.replace('|', chr(92) + '|')} | {rate:,.0f} | {mbps:,.0f} | {'-' if cpu_rate is None else f'{cpu_rate:,.0f}'} |")
    ours, theirs = rows["tensorcom raw"], rows["webdataset raw"]
    cat, cat_pipe = rows["cat > /dev/null"], rows["cat | wc -c"]
    decode_ours, decode_theirs = rows["tensorcom rgb8"], rows["webdataset rgb8"]
    print("\n| ratio | wall clock | CPU time | target |\n|---|---:|---:|---:|")
    fallback = rows["tensorcom raw, pure Python"]
    print(f"| raw samples/s, tensorcom / webdataset | {ours[0] / theirs[0]:.1f}x | {ours[2] / theirs[2]:.1f}x | >= 20x |")
    print(f"| raw samples/s, tensorcom pure Python / webdataset | {fallback[0] / theirs[0]:.1f}x | "
          f"{fallback[2] / theirs[2]:.1f}x | - |")
    print(f"| raw MB/s, tensorcom / (cat \\| wc -c) | {ours[1] / cat_pipe[1]:.0%} | - | >= 50% |")
    print(f"| raw MB/s, tensorcom / (cat > /dev/null) | {ours[1] / cat[1]:.0%} | - | (>= 50%) |")
    print(f"| rgb8 samples/s, tensorcom / webdataset | {decode_ours[0] / decode_theirs[0]:.2f}x | "
          f"{decode_ours[2] / decode_theirs[2]:.2f}x | >= 1x |")


if __name__ == "__main__":
    main()
