"""Tables and Hugging Face datasets as inputs of tensorcom.shards.convert (datasets imported when used).

    TableInput(path)               a Parquet or Arrow IPC file, or a directory of them (sorted names): a
                                   sample per row, read with tensorcom.shards.tables
    HuggingFaceInput(path, split)  a Hugging Face dataset saved with save_to_disk (a DatasetDict: `split`)

A row becomes a sample: "__key__" from a `__key__` column, else the row's index ("%09d"); bytes and
str values as they are; numbers and booleans as their text; arrays (fixed-size lists, tensors) as
COLUMN.npy; other lists and dicts as JSON; None left out.
An image struct ({"bytes": ..., "path": ...}, as Hugging Face stores Image features) becomes the
field COLUMN.EXT holding the original bytes (EXT from the path, else from the bytes' signature).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Iterator

import numpy as np

from tensorcom.errors import OpenError
from tensorcom.shards.convert import ConvertInput
from tensorcom.shards.fields import encode_field
from tensorcom.shards.tables import TableReader, table_units

_SIGNATURES = ((b"\xff\xd8\xff", "jpg"), (b"\x89PNG", "png"), (b"GIF8", "gif"), (b"RIFF", "webp"), (b"BM", "bmp"))
_ROWS_PER_READ = 1024


def _image_ext(value: dict[str, Any]) -> str:
    path = value.get("path") or ""
    ext = os.path.splitext(path)[1][1:].lower()
    if ext:
        return ext
    data = value.get("bytes") or b""
    return next((name for magic, name in _SIGNATURES if data.startswith(magic)), "bin")


def row_sample(row: dict[str, Any], index: int) -> dict[str, Any]:
    """The sample of one table row (module docstring)."""
    sample: dict[str, Any] = {"__key__": str(row["__key__"]) if row.get("__key__") is not None else f"{index:09d}"}
    for column, value in row.items():
        if column == "__key__" or value is None:
            continue
        if isinstance(value, dict) and isinstance(value.get("bytes"), bytes):
            sample[f"{column}.{_image_ext(value)}"] = value["bytes"]
        elif isinstance(value, (bytes, str)):
            sample[column] = value
        elif isinstance(value, (bool, int, float)):
            sample[column] = str(value)
        elif isinstance(value, np.ndarray):
            sample[f"{column}.npy"] = encode_field("npy", value)
        else:
            sample[column] = json.dumps(value, default=str)
    return sample


_KINDS = {".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow"}


def table_files(path: str) -> tuple[list[str], str]:
    """([`path`] or the sorted table files of directory `path`, their kind "parquet" or "arrow"), by
    extension (.parquet; .arrow, .feather, .ipc); OpenError when there is none, ValueError for a mixture."""
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if os.path.splitext(f)[1] in _KINDS)
        if not files:
            raise OpenError(f"no {'/'.join(_KINDS)} files in this directory", url=path)
    elif os.path.isfile(path):
        files = [path]
    else:
        raise OpenError("no such file or directory", url=path)
    kinds = {_KINDS.get(os.path.splitext(f)[1], "parquet") for f in files}
    if len(kinds) > 1:
        raise ValueError(f"{path} mixes Parquet and Arrow files: convert them separately")
    return files, kinds.pop()


class TableInput(ConvertInput):
    """The rows of Parquet or Arrow IPC file(s) at `path`, read by tensorcom.shards.tables unit by unit (row
    group or record batch): a slice reads only the units that hold it."""

    def __init__(self, path: str):
        self.files, self.kind = table_files(os.fspath(path))
        self.description = f"{self.kind} table {path}"
        self.units = table_units(self.files, self.kind)

    def __len__(self) -> int:
        return sum(unit.rows for unit in self.units)

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for file in self.files:
            st = os.stat(file)
            digest.update(f"{os.path.basename(file)}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
        digest.update(repr([unit.rows for unit in self.units]).encode())
        return digest.hexdigest()

    def read(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        first, wanted = 0, []
        for unit in self.units:
            if first + unit.rows > start and first < stop:
                wanted.append((first, unit))
            first += unit.rows
        if not wanted:
            return
        index = wanted[0][0]
        for row in TableReader([unit for _, unit in wanted], kind=self.kind):
            if start <= index < stop:
                yield row_sample(row, index)
            index += 1


class HuggingFaceInput(ConvertInput):
    """The rows of a dataset saved by `datasets` (`save_to_disk`) at `path`; `split` picks one of a
    DatasetDict (default: "train", or its only split). Image columns are read undecoded (original bytes)."""

    def __init__(self, path: str, split: str | None = None):
        self.path, self.split = os.fspath(path), split
        self.description = f"Hugging Face dataset {self.path}" + (f" [{split}]" if split else "")
        self._dataset: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_dataset": None}  # each process opens the (memory-mapped) files itself

    def dataset(self) -> Any:
        if self._dataset is None:
            import datasets

            try:
                loaded = datasets.load_from_disk(self.path)
            except FileNotFoundError as exc:
                raise OpenError(f"not a saved Hugging Face dataset: {exc}", url=self.path) from exc
            if isinstance(loaded, datasets.DatasetDict):
                splits = list(loaded)
                split = self.split or ("train" if "train" in splits else splits[0] if len(splits) == 1 else None)
                if split not in loaded:
                    raise ValueError(f"{self.path} holds splits {splits}: choose one (--split), not {self.split!r}")
                loaded = loaded[split]
            for column, feature in loaded.features.items():
                if isinstance(feature, datasets.Image):
                    loaded = loaded.cast_column(column, datasets.Image(decode=False))
            self._dataset = loaded
        return self._dataset

    def __len__(self) -> int:
        return len(self.dataset())

    def fingerprint(self) -> str:
        dataset = self.dataset()
        return hashlib.sha256(f"{dataset._fingerprint}\t{len(dataset)}".encode()).hexdigest()

    def read(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        dataset = self.dataset()
        for first in range(start, stop, _ROWS_PER_READ):
            columns = dataset[first:min(first + _ROWS_PER_READ, stop)]
            names = list(columns)
            for offset, values in enumerate(zip(*columns.values())):
                yield row_sample(dict(zip(names, values)), first + offset)
