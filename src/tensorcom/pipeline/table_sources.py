"""Parquet and Arrow IPC tables as pipeline sources (pyarrow, the `parquet` extra, imported when used).

    ParquetSource(urls, columns=None, filter=None, shuffle=False, keys=False, batch_rows=None, rank=None,
                  world_size=None, **open_options)
    ArrowSource(urls, ...)              the same for Arrow IPC files (Feather v2), one unit per record batch

Samples are dicts {column: value} (tensorcom.shards.tables says which Python / numpy value each column
type gives); `keys=True` adds "__key__" (the row's index in its file, as a string) and "__url__", as
tar samples have them (two more fields in every row: somewhat slower). `batch_rows=N` yields batches
instead, {column: numpy array (numbers, fixed-size lists, tensors) or list}, of N rows of one row
group (the last of each row group shorter): no Python object per row, so several times faster; its
items, `len` and state count batches. The unit of work is a row group (a record batch):
the units of all files, listed from the files' footers once per source object, are ordered per
split as a stride between nodes (rank / world_size, or RANK / WORLD_SIZE) and workers, so every
unit goes to exactly one (node, worker) and nobody reads and skips another's rows; `shuffle` then
orders each portion's units per (seed, epoch) and permutes the rows inside each unit (for a wider
mix, add `Pipeline.shuffle(bufsize)`). A portion keeps its units every epoch, so its `len` is exact. `len` is the row count of the portion from
the metadata (without `filter`, which makes it unknown). State: the unit and the rows of it yielded;
restoring re-reads that one row group. `urls` takes the shard-list grammar (braces, `a::b`, lists).
"""

from __future__ import annotations

from typing import Any, Sequence

from tensorcom.checks import near_misses, positive
from tensorcom.pipeline.sources import Source
from tensorcom.shards import OPEN_OPTIONS
from tensorcom.shards.shardlist import epoch_order, expand_urls, node_and_world, split_index
from tensorcom.shards.tables import TableReader, TableUnit, filter_expression, table_units
from tensorcom.wire import strided

TABLE_OPTIONS = tuple(option for option in OPEN_OPTIONS if option != "require_end_blocks")  # gopen's


class TableSource(Source):
    """Rows of Parquet (`kind="parquet"`) or Arrow IPC (`kind="arrow"`) files (see the module docstring)."""

    kind = "parquet"

    def __init__(self, urls: str | Sequence[str], *, columns: Sequence[str] | None = None, filter: Any = None,
                 shuffle: bool = False, keys: bool = False, batch_rows: int | None = None, rank: int | None = None,
                 world_size: int | None = None, **open_options: Any):
        near_misses(type(self).__name__, open_options, TABLE_OPTIONS)
        if isinstance(columns, str):
            raise TypeError(f"columns takes a list of column names, not one string: {columns!r}")
        filter_expression(filter)  # a malformed filter fails now
        self.urls = expand_urls(urls)
        self.columns = None if columns is None else list(columns)
        self.filter, self.shuffle, self.keys, self.open_options = filter, bool(shuffle), bool(keys), open_options
        self.batch_rows = None if batch_rows is None else positive("batch_rows", batch_rows)
        self.rank, self.world_size = node_and_world(rank, world_size)
        self._units: list[TableUnit] | None = None

    def units(self) -> list[TableUnit]:
        """Every row group of every file, read from their metadata on first use and kept."""
        if self._units is None:
            self._units = table_units(self.urls, self.kind, **self.open_options)
        return self._units

    def portion(self, seed: int, epoch: int, worker: int, num_workers: int) -> list[TableUnit]:
        """This (node, worker)'s units, in the order of (seed, epoch) when shuffled; ValueError when it
        gets none. The split comes first, so a portion holds the same units (and rows) every epoch."""
        units = self.units()
        index, count = split_index(self.rank, self.world_size, worker, num_workers)
        chosen = strided(units, index, count)
        if not chosen:
            raise ValueError(f"rank {self.rank} of world size {self.world_size}, worker {worker} of {num_workers} "
                             f"gets none of the {len(units)} row groups: use at most {len(units)} nodes x workers "
                             f"in all, or write the table with smaller row groups")
        return [chosen[i] for i in epoch_order(len(chosen), self.shuffle, seed, epoch)]

    def open(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> TableReader:
        return TableReader(self.portion(seed, epoch, worker, num_workers), kind=self.kind, columns=self.columns,
                           filter=self.filter, shuffle_key=(seed, epoch) if self.shuffle else None,
                           keys=self.keys, batch_rows=self.batch_rows, **self.open_options)

    def length(self, worker: int = 0, num_workers: int = 1) -> int | None:
        if self.filter is not None:
            return None
        units = self.portion(0, 0, worker, num_workers)
        if self.batch_rows:
            return sum(-(-unit.rows // self.batch_rows) for unit in units)
        return sum(unit.rows for unit in units)

    def __len__(self) -> int:
        length = self.length()
        if length is None:
            raise TypeError(f"a {type(self).__name__} with a filter has no known length")
        return length


class ParquetSource(TableSource):
    """Rows of Parquet files, a row group at a time (see the module docstring)."""

    kind = "parquet"


class ArrowSource(TableSource):
    """Rows of Arrow IPC files (`.arrow`, Feather v2), a record batch at a time (see the module docstring)."""

    kind = "arrow"
