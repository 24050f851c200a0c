"""Image folder → tar shards: `tensorcom shard -j 2` against WebDataset's ShardWriter (and LitData's
`optimize` when a venv with litdata is given), on the same files, in the same run.

    ./run python benchmarks/shard_writer.py [--images 20000] [--per-shard 1000] [--repeats 3]
                                            [--writers tensorcom,webdataset,litdata]
                                            [--litdata-python /tmp/litdata-venv/bin/python] [--root DIR]

The folder (--images small JPEGs of 48×48 noise, ~2 KB each, in 10 class folders) is made once and
cached under ROOT/images-N (ROOT: bench-data/shard_writer unless --root). Every file is read once
before the first timing, so every writer reads from the page cache. Each writer converts the whole
folder into shards of --per-shard samples under a fresh directory; its time runs from listing the
folder to the last shard on disk, best of --repeats:

    tensorcom   tensorcom.pipeline.shard_writing.convert over FilesInput(ImageFolder(DIR)), processes=2:
                what `tensorcom shard DIR -o ... -j 2` runs (the command adds the interpreter's start-up)
    webdataset  the loop of WebDataset's documentation: ImageFolder's file list, each file read and
                written with webdataset.ShardWriter({"__key__", "jpg": bytes, "cls": label}), one process
    litdata     litdata.optimize(fn=read the file, inputs=the paths, num_workers=2, chunk_bytes ~ the
                same shard size), run in LitData's own interpreter (--litdata-python), timed inside it

Every output is counted (a writer that loses a sample raises). It prints a table of samples/s and the
ratio of each to WebDataset, with the target (tensorcom >= 3x webdataset's samples/s). The writers
take turns in each repeat, so that a change in the machine's load falls on all of them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tensorcom import shards
from tensorcom.images import ImageFolder
from tensorcom.pipeline.shard_writing import convert
from tensorcom.shards.convert import FilesInput

ROOT = Path(__file__).resolve().parent.parent / "bench-data" / "shard_writer"
CLASSES = 10
TARGET = 3.0

LITDATA_SCRIPT = r"""
import json, os, sys, time
from litdata import optimize

def read(path):
    with open(path, "rb") as stream:
        return {"jpg": stream.read(), "cls": int(os.path.basename(os.path.dirname(path))[1:])}

if __name__ == "__main__":
    with open(sys.argv[1]) as stream:
        files = json.load(stream)
    out, chunk = sys.argv[2], int(sys.argv[3])
    start = time.perf_counter()
    optimize(fn=read, inputs=files, output_dir=out, num_workers=2, chunk_bytes=chunk, mode="overwrite")
    print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def make_images(root: Path, count: int) -> Path:
    """The cached folder of `count` JPEGs in CLASSES class folders (made once)."""
    folder = root / f"images-{count}"
    if (folder / ".done").exists():
        return folder
    from PIL import Image

    shutil.rmtree(folder, ignore_errors=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        directory = folder / f"c{i % CLASSES}"
        directory.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (48, 48, 3), dtype=np.uint8)).save(buffer, "JPEG", quality=80)
        (directory / f"{i:07d}.jpg").write_bytes(buffer.getvalue())
    (folder / ".done").write_text("")
    return folder


def warm(folder: Path) -> tuple[int, int]:
    """Read every file once (page cache); (files, bytes)."""
    files = total = 0
    for path, _ in ImageFolder(folder):
        with open(path, "rb") as stream:
            total += len(stream.read())
        files += 1
    return files, total


def run_tensorcom(folder: Path, out: Path, per_shard: int) -> float:
    start = time.perf_counter()
    tree = ImageFolder(folder)
    convert(FilesInput(tree.samples, tree.root), str(out / "train-%06d.tar"), maxcount=per_shard, processes=2)
    return time.perf_counter() - start


def run_webdataset(folder: Path, out: Path, per_shard: int) -> float:
    import webdataset as wds

    start = time.perf_counter()
    tree = ImageFolder(folder)
    with wds.ShardWriter(str(out / "train-%06d.tar"), maxcount=per_shard, verbose=0) as sink:
        for path, label in tree.samples:
            with open(path, "rb") as stream:
                image = stream.read()
            key = os.path.splitext(os.path.relpath(path, tree.root))[0]
            sink.write({"__key__": key, "jpg": image, "cls": label})
    return time.perf_counter() - start


def run_litdata(folder: Path, out: Path, python: str, shard_bytes: int) -> float:
    script = out.parent / "litdata_optimize.py"
    script.write_text(LITDATA_SCRIPT)
    files = out.parent / "files.json"
    files.write_text(json.dumps([path for path, _ in ImageFolder(folder)]))
    done = subprocess.run([python, str(script), str(files), str(out), str(shard_bytes)],
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"litdata optimize failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def timed(writer: str, folder: Path, args: argparse.Namespace, files: int, shard_bytes: int) -> float:
    """Seconds `writer` took to convert `folder` into a fresh directory (removed after); RuntimeError
    when its output does not hold every file."""
    out = Path(tempfile.mkdtemp(prefix=f"{writer}-", dir=args.root))
    try:
        if writer == "tensorcom":
            seconds = run_tensorcom(folder, out, args.per_shard)
        elif writer == "webdataset":
            seconds = run_webdataset(folder, out, args.per_shard)
        else:
            seconds = run_litdata(folder, out / "out", args.litdata_python, shard_bytes)
        written = count_litdata(out / "out") if writer == "litdata" else count_tar(out)
        if written != files:
            raise RuntimeError(f"{writer} wrote {written} samples, not {files}")
        return seconds
    finally:
        shutil.rmtree(out, ignore_errors=True)


def count_litdata(out: Path) -> int:
    """Items in LitData's chunks, from its index.json."""
    index = json.loads((out / "index.json").read_text())
    return sum(chunk["chunk_size"] for chunk in index["chunks"])


def count_tar(out: Path) -> int:
    return sum(1 for _ in shards.samples(sorted(str(p) for p in out.glob("*.tar"))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--per-shard", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--writers", default="tensorcom,webdataset,litdata")
    parser.add_argument("--litdata-python", default="/tmp/litdata-venv/bin/python")
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    writers = args.writers.split(",")
    folder = make_images(args.root, args.images)
    files, size = warm(folder)
    print(f"# {files} JPEGs, {size / files / 1e3:.1f} KB each, shards of {args.per_shard}; "
          f"{os.cpu_count()} CPUs; best of {args.repeats}")
    results: dict[str, float | str] = {}
    best = {writer: float("inf") for writer in writers}
    for writer in writers:
        if writer == "litdata" and not os.path.exists(args.litdata_python):
            results[writer] = f"not installed ({args.litdata_python})"
    for _ in range(args.repeats):  # the writers take turns, so that a change in the machine's load hits all
        for writer in [w for w in writers if w not in results]:
            best[writer] = min(best[writer], timed(writer, folder, args, files, int(size / files * args.per_shard)))
    for writer in writers:
        results.setdefault(writer, files / best[writer])
    print_table(results)
    return 0


def print_table(results: dict[str, float | str]) -> None:
    base = results.get("webdataset")
    print("| writer | samples/s | vs webdataset |")
    print("|---|---:|---:|")
    for writer, rate in results.items():
        if isinstance(rate, str):
            print(f"| {writer} | {rate} | |")
            continue
        ratio = f"{rate / base:.2f}x" if isinstance(base, float) else ""
        if writer == "tensorcom" and ratio:
            ratio += f" (target >= {TARGET:.0f}x: {'met' if rate / base >= TARGET else 'MISSED'})"
        print(f"| {writer} | {rate:,.0f} | {ratio} |")


if __name__ == "__main__":
    sys.exit(main())
