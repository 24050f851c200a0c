"""Parquet as a pipeline source: write a small table, read it by row group, decode, batch, resume.

    python examples/data_parquet.py [--dir DIR]

Writes 96 rows (a 16×16 PNG image, a label and a caption) as two Parquet files of row groups of 16
(into a temporary folder unless --dir), then reads them with `tensorcom.pipeline.ParquetSource`:
shuffled per epoch by row group and within each row group, image bytes decoded by the "png" column's
name, batched. Two workers' portions are whole row groups that together make the table; the
position saved after two batches resumes exactly (re-reading one row group). Seconds, no network.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tensorcom import Pipeline
from tensorcom.imagecodec import encode_image
from tensorcom.pipeline import ParquetSource


def write_table(folder: Path) -> list[str]:
    """Two Parquet files of 48 rows each, in row groups of 16: {"png": bytes, "label": int, "caption": str}."""
    paths = []
    for part in range(2):
        ids = range(48 * part, 48 * (part + 1))
        table = pa.table({
            "png": [encode_image(np.full((16, 16, 3), i, np.uint8), "png") for i in ids],
            "label": [i % 4 for i in ids],
            "caption": [f"a flat square of grey {i}" for i in ids],
        })
        paths.append(str(folder / f"part-{part}.parquet"))
        pq.write_table(table, paths[-1], row_group_size=16)
    return paths


def pipeline(paths: list[str]) -> Pipeline:
    source = ParquetSource(paths, columns=["png", "label"], shuffle=True)
    return Pipeline(source, seed=7).decode("rgb8").to_tuple("png", "label").batch(16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="where to write the table (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_table(Path(args.dir or tmp))
        print(f"rows: {len(ParquetSource(paths))} in {len(ParquetSource(paths).units())} row groups")
        batches = list(pipeline(paths))
        images, labels = batches[0]
        print(f"batches: {len(batches)} of images {images.shape} {images.dtype}, labels {labels[:8].tolist()}...")
        portions = [sum(len(b[1]) for b in pipeline(paths).shard(w, 2)) for w in range(2)]
        print(f"two workers' portions: {portions} rows")
        first = pipeline(paths)
        it = iter(first)
        head = [next(it), next(it)]
        state = first.state_dict()
        second = pipeline(paths)
        second.load_state_dict(state)
        rest = list(second)
        same = all((a[1] == b[1]).all() for a, b in zip(head + rest, batches)) and len(head + rest) == len(batches)
        print(f"resumed after 2 batches: {len(rest)} more, the same as without a stop: {same}")


if __name__ == "__main__":
    main()
