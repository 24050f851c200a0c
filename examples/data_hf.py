"""A Hugging Face dataset as a pipeline source, offline: load local Parquet, split, shuffle, resume.

    python examples/data_hf.py [--dir DIR]

Builds a small dataset locally (64 rows of a PNG image and a label, written as Parquet into a
temporary folder unless --dir), loads it with `datasets.load_dataset("parquet", data_files=...)`
and hands it to `Pipeline` as it stands: rows are read by index, shuffled per (seed, epoch), split
exactly between workers, and resumed by index. The same data as an `IterableDataset` resumes through
the dataset's own state_dict. Nothing reaches the Hugging Face hub (HF_HUB_OFFLINE=1). Seconds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before datasets is imported: it reads them once
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets  # noqa: E402
import numpy as np  # noqa: E402

from tensorcom import Pipeline  # noqa: E402
from tensorcom.imagecodec import encode_image  # noqa: E402
from tensorcom.pipeline import HFSource  # noqa: E402


def local_dataset(folder: Path) -> datasets.Dataset:
    """64 rows {"png": bytes, "label": int}, written as Parquet and loaded back with load_dataset."""
    rows = {"png": [encode_image(np.full((8, 8, 3), i, np.uint8), "png") for i in range(64)],
            "label": [i % 4 for i in range(64)]}
    datasets.Dataset.from_dict(rows).to_parquet(str(folder / "train.parquet"))
    return datasets.load_dataset("parquet", data_files=str(folder / "train.parquet"), split="train",
                                 cache_dir=str(folder / "cache"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="where to write the data (default: a temporary folder)")
    args = parser.parse_args()
    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory() as tmp:
        dataset = local_dataset(Path(args.dir or tmp))
        pipeline = Pipeline(HFSource(dataset, shuffle=True), seed=3).decode("rgb8").to_tuple("png", "label").batch(16)
        images, labels = next(iter(pipeline))
        print(f"rows: {len(Pipeline(dataset))}; first batch: images {images.shape} {images.dtype}, "
              f"labels {labels[:8].tolist()}...")
        portions = [[int(x) for _, b in pipeline.shard(w, 2) for x in b] for w in range(2)]
        print(f"two workers: {[len(p) for p in portions]} rows")
        first = Pipeline(dataset.to_iterable_dataset(num_shards=4)).map(lambda row: row["label"])
        it = iter(first)
        head = [next(it) for _ in range(10)]
        state = first.state_dict()
        second = Pipeline(dataset.to_iterable_dataset(num_shards=4)).map(lambda row: row["label"])
        second.load_state_dict(state)
        rest = list(second)
        print(f"IterableDataset resumed after 10 rows: {len(rest)} more, "
              f"the same as without a stop: {head + rest == [i % 4 for i in range(64)]}")


if __name__ == "__main__":
    main()
