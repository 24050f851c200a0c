"""Parquet reading speed: tensorcom's ParquetSource vs a bare pyarrow loop, Hugging Face datasets
streaming and Ray Data, on the same files, in one run.

    ./run bench benchmarks/formats.py [--rows 400000] [--files 8] [--row-group 10000] [--repeats 3]
                                      [--readers tensorcom,pyarrow,hf,ray] [--quick]

The table (--rows rows in --files Parquet files of --row-group rows per row group, snappy) has the
columns of a typical sample table: id int64, label int64, score float32, text string (~20 chars),
payload binary (200 bytes). It is written once under bench-data/formats/. Every reader yields one
Python dict per row, and must yield every row (a count that differs raises):

    tensorcom   iter(Pipeline(ParquetSource(files)))
    pyarrow     for each file: ParquetFile(f).iter_batches(batch_size=row group), batch.to_pylist()
    hf          datasets.load_dataset("parquet", data_files=files, streaming=True, split="train")
    ray         ray.data.read_parquet(files).iter_rows() (ray.init before the clock starts)

and, for reference, `tensorcom-batches`: ParquetSource(files, batch_rows=1000), batches of column arrays
(no dict per row), counted in rows.

Rows/s is the best of --repeats rounds from the page cache (a round runs every reader once, so a
change in the machine's load touches them alike), after one warm-up pass per reader. It
prints the table and the ratios against the targets: tensorcom / pyarrow >= 0.8x, tensorcom / hf >= 2x,
tensorcom / ray >= 2x. `--quick` (100,000 rows in 4 files) runs in well under three minutes.
Nothing reaches a network: HF runs offline.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before datasets is imported
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from tensorcom import Pipeline  # noqa: E402
from tensorcom.pipeline import ParquetSource  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent / "bench-data" / "formats"
READERS = ("tensorcom", "pyarrow", "hf", "ray", "tensorcom-batches")
TARGETS = {"pyarrow": 0.8, "hf": 2.0, "ray": 2.0}


def write_files(root: Path, rows: int, files: int, row_group: int) -> list[str]:
    """The benchmark's Parquet files (written once per shape), as a list of paths."""
    folder = root / f"{rows}x{files}x{row_group}"
    paths = [str(folder / f"part-{i:03d}.parquet") for i in range(files)]
    if all(os.path.exists(p) for p in paths):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    per_file = rows // files
    for i, path in enumerate(paths):
        count = per_file if i < files - 1 else rows - per_file * (files - 1)
        ids = np.arange(i * per_file, i * per_file + count)
        table = pa.table({
            "id": ids,
            "label": rng.integers(0, 1000, count),
            "score": rng.random(count, dtype=np.float32),
            "text": [f"sample number {k:08d}" for k in ids],
            "payload": [rng.bytes(200) for _ in range(count)],
        })
        pq.write_table(table, path + ".tmp", row_group_size=row_group, compression="snappy")
        os.replace(path + ".tmp", path)
    return paths


def tensorcom_rows(paths: list[str]) -> Iterable[dict]:
    return iter(Pipeline(ParquetSource(paths)))


def tensorcom_batches(paths: list[str]) -> Iterable[dict]:
    return iter(Pipeline(ParquetSource(paths, batch_rows=1000)))


def pyarrow_rows(paths: list[str], row_group: int) -> Iterable[dict]:
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=row_group):
            yield from batch.to_pylist()


def hf_rows(paths: list[str]) -> Iterable[dict]:
    import datasets

    datasets.disable_progress_bars()
    return iter(datasets.load_dataset("parquet", data_files=paths, streaming=True, split="train"))


def ray_rows(paths: list[str]) -> Iterable[dict]:
    import ray

    return ray.data.read_parquet(paths).iter_rows()


def count_rows(rows: Iterable[dict]) -> int:
    count = 0
    for _ in rows:
        count += 1
    return count


def count_batch_rows(batches: Iterable[dict]) -> int:
    return sum(len(batch["id"]) for batch in batches)


def one_pass(make: Callable[[], Iterable[dict]], expected: int, count: Callable[[Iterable[dict]], int]) -> float:
    """Rows/s of one pass; raises if it does not yield `expected` rows."""
    start = time.perf_counter()
    rows = count(make())
    elapsed = time.perf_counter() - start
    if rows != expected:
        raise RuntimeError(f"a reader yielded {rows} rows, not {expected}")
    return rows / elapsed


def measure(makers: dict[str, Callable[[], Iterable[dict]]], expected: int, repeats: int) -> dict[str, float]:
    """Best rows/s of each reader over `repeats` rounds, after a warm-up pass of each; a round runs
    every reader once, so that a change in the machine's load touches them all alike."""
    counters = {name: count_batch_rows if name == "tensorcom-batches" else count_rows for name in makers}
    for name, make in makers.items():
        one_pass(make, expected, counters[name])
    best = dict.fromkeys(makers, 0.0)
    for _ in range(repeats):
        for name, make in makers.items():
            best[name] = max(best[name], one_pass(make, expected, counters[name]))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--row-group", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--quick", action="store_true", help="100,000 rows in 4 files")
    parser.add_argument("--root", default=str(ROOT), help="where the files are written (default: bench-data/formats)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.files = min(args.rows, 100_000), min(args.files, 4)
    readers = [r for r in args.readers.split(",") if r]
    unknown = sorted(set(readers) - set(READERS))
    if unknown:
        parser.error(f"unknown readers {unknown}; choose from {list(READERS)}")
    paths = write_files(Path(args.root), args.rows, args.files, args.row_group)
    makers = {
        "tensorcom": lambda: tensorcom_rows(paths),
        "pyarrow": lambda: pyarrow_rows(paths, args.row_group),
        "hf": lambda: hf_rows(paths),
        "ray": lambda: ray_rows(paths),
        "tensorcom-batches": lambda: tensorcom_batches(paths),
    }
    if "ray" in readers:
        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)
    print(f"{args.rows} rows in {args.files} Parquet files, row groups of {args.row_group}; "
          f"best of {args.repeats}; python {sys.version.split()[0]}, pyarrow {pa.__version__}", flush=True)
    speeds = measure({name: makers[name] for name in readers}, args.rows, args.repeats)
    for name in readers:
        print(f"  {name}: {speeds[name]:,.0f} rows/s", flush=True)
    print()
    print("| reader | rows/s | tensorcom / reader | target |")
    print("|---|---:|---:|---:|")
    for name in readers:
        ratio = speeds["tensorcom"] / speeds[name] if "tensorcom" in speeds else float("nan")
        target = f">= {TARGETS[name]}x" if name in TARGETS else ""
        print(f"| {name} | {speeds[name]:,.0f} | {ratio:.2f}x | {target} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
