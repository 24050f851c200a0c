"""Parquet and Arrow IPC (Feather v2) tables as samples, read with pyarrow (the `parquet` extra).

    table_units(urls, kind, **open_options) -> [TableUnit]   one per row group (Parquet) or record batch
                                                              (Arrow IPC), from the files' footers only
    TableReader(units, columns=None, filter=None, shuffle_key=None, keys=False, batch_rows=None, **open_options)
        next(reader)               -> {column: value, ...}; with keys=True also "__key__": "ROW" (the row's
                                      index in its file) and "__url__": url; with batch_rows=N a batch
                                      {column: N values} of N rows of one unit (fewer at its end)
        reader.state_dict()        -> {"unit": i, "row": j}: j rows (batches) of unit i already yielded
        reader.load_state_dict(s)  re-reads unit i only (never the units before it) and goes on after row j

A unit is the smallest piece read at once; the list of units is what the pipeline shuffles and splits
between nodes and workers (tensorcom.pipeline.table_sources), so no reader ever reads a unit that is
not its own. Values: binary columns as bytes (a column named "jpg" decodes like a tar member), strings
as str, numbers as Python scalars, fixed-size lists and tensor columns as numpy arrays, the rest as
pyarrow's Python values. `filter` is a pyarrow.compute expression or a list of (column, value) pairs
that must all hold; `shuffle_key` (seed, epoch) permutes the rows inside each unit.

Listing reads a Parquet file's footer only; an Arrow IPC file has no row counts in its footer, so
listing reads each record batch once (cheap for local files, which are memory-mapped). Feather v1
files are not Arrow IPC files: convert them with pyarrow.feather.

URLs open through gopen: local files memory-mapped, seekable streams (s3:// and other fsspec URLs)
read in place, http(s):// through `RangeFile` (one ranged GET per run of sequential reads), anything
else (pipe:) read whole. A truncated or corrupt file, or a missing column, is a ShardError naming the
URL and the row group; a URL that cannot be opened is an OpenError.
"""

from __future__ import annotations

import functools
import io
import itertools
import operator
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from tensorcom.errors import OpenError, ShardError
from tensorcom.extras import require
from tensorcom.shards._schemes import scheme_of
from tensorcom.shards.gopen import gopen

KINDS = ("parquet", "arrow")


@dataclass(frozen=True)
class TableUnit:
    """Row group (or record batch) `index` of the file at `url`: `rows` rows starting at file row `start`."""

    url: str
    index: int
    rows: int
    start: int


class RangeFile(io.RawIOBase):
    """A seekable read-only file over an http(s) URL: each run of sequential reads is one GET from its
    offset (a Range request, tensorcom.shards._schemes.HTTPStream); `size` from the first answer."""

    def __init__(self, url: str, **options: Any):
        super().__init__()
        self.url, self.options = url, options
        self._stream = gopen(url, "rb", **options)
        self.size = self._stream.raw.size
        self.pos = self._stream_pos = 0
        if self.size is None:
            raise OpenError("the server does not say the file's length (no Content-Length)", url=url)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        wanted = min(len(buffer), max(0, self.size - self.pos))
        if not wanted:
            return 0
        if self._stream is None or self._stream_pos != self.pos:
            if self._stream is not None:
                self._stream.close()
            self._stream = gopen(self.url, "rb", offset=self.pos, **self.options)
            self._stream_pos = self.pos
        view, done = memoryview(buffer).cast("B"), 0
        while done < wanted:
            count = self._stream.readinto(view[done:wanted])
            if not count:
                break
            done += count
        self.pos += done
        self._stream_pos += done
        return done

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        super().close()


def open_table_file(url: str, **open_options: Any) -> Any:
    """A pyarrow-readable random-access file for `url` (see the module docstring); OpenError if it cannot open."""
    pa = require("pyarrow")
    scheme = scheme_of(url)
    if scheme == "file" and not open_options:
        path = url[len("file://"):] if url.startswith("file://") else url
        try:
            return pa.memory_map(path)
        except OSError as exn:
            raise OpenError(str(exn), url=url) from exn
    if scheme in ("http", "https"):
        return RangeFile(url, **open_options)
    stream = gopen(url, "rb", **open_options)
    if stream.seekable():
        return stream
    with stream:
        return pa.BufferReader(stream.read())


def _table_error(url: str, unit: int | None, exn: BaseException, kind: str) -> ShardError:
    where = None if unit is None else f"{'row group' if kind == 'parquet' else 'record batch'} {unit}"
    return ShardError(f"cannot read this {kind} file: {type(exn).__name__}: {exn}", url=url, member=where)


class TableFile:
    """One open Parquet or Arrow IPC file: `counts` (rows per unit) and `read(unit, columns)` -> pyarrow Table."""

    def __init__(self, url: str, kind: str, **open_options: Any):
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.url, self.kind = url, kind
        self.file = open_table_file(url, **open_options)
        try:
            if kind == "parquet":
                pq = require("pyarrow.parquet")
                self.reader = pq.ParquetFile(self.file, pre_buffer=True)
                meta = self.reader.metadata
                self.counts = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
                self.names = list(self.reader.schema_arrow.names)
            else:
                ipc = require("pyarrow.ipc")
                self.reader = ipc.open_file(self.file)
                self.counts = [self.reader.get_batch(i).num_rows for i in range(self.reader.num_record_batches)]
                self.names = list(self.reader.schema.names)
        except (OSError, ValueError) as exn:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
            self.close()
            if isinstance(exn, OpenError):
                raise
            raise _table_error(url, None, exn, kind) from exn

    def read(self, unit: int, columns: Sequence[str] | None) -> Any:
        """Unit `unit` as a pyarrow Table of `columns` (None: all); ShardError naming the unit."""
        missing = [c for c in columns or () if c not in self.names]
        if missing:
            raise ShardError(f"no column {missing[0]!r}; the columns are {self.names}", url=self.url)
        try:
            if self.kind == "parquet":
                return self.reader.read_row_group(unit, columns=None if columns is None else list(columns))
            pa = require("pyarrow")
            table = pa.Table.from_batches([self.reader.get_batch(unit)])
            return table if columns is None else table.select(list(columns))
        except (OSError, ValueError) as exn:
            raise _table_error(self.url, unit, exn, self.kind) from exn

    def close(self) -> None:
        file, self.file = getattr(self, "file", None), None
        if file is not None:
            file.close()


def table_units(urls: Sequence[str], kind: str, **open_options: Any) -> list[TableUnit]:
    """Every unit of every file of `urls`, file by file, from the files' metadata."""
    units = []
    for url in urls:
        table = TableFile(url, kind, **open_options)
        try:
            start = 0
            for index, rows in enumerate(table.counts):
                units.append(TableUnit(url, index, rows, start))
                start += rows
        finally:
            table.close()
    return units


def filter_expression(condition: Any) -> tuple[Any, list[str] | None]:
    """(pyarrow.compute expression, the columns it reads or None when unknown) from `condition`: an
    expression as it is, or [(column, value), ...] (all must hold); None gives (None, []). TypeError
    for anything else."""
    if condition is None:
        return None, []
    pc = require("pyarrow.compute")
    if isinstance(condition, pc.Expression):
        return condition, None
    pairs = [condition] if isinstance(condition, tuple) else condition
    if not isinstance(pairs, list) or not pairs or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        raise TypeError(f"filter must be a pyarrow expression or [(column, value), ...], got {condition!r}")
    expression = None
    for column, value in pairs:
        term = pc.field(column) == value
        expression = term if expression is None else expression & term
    return expression, [column for column, _ in pairs]


def column_values(column: Any, as_rows: bool = True) -> list | np.ndarray:
    """The values of one pyarrow column (ChunkedArray), one per row (see the module docstring); with
    `as_rows=False`, numbers as one numpy array rather than a list of scalars (a batch's field)."""
    pa = require("pyarrow")
    kind = column.type
    if isinstance(kind, pa.FixedShapeTensorType):
        return column.combine_chunks().to_numpy_ndarray()
    if pa.types.is_fixed_size_list(kind) and column.null_count == 0:
        flat = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(column), kind.list_size, *flat.shape[1:])
    if (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)) \
            and column.null_count == 0:
        values = column.to_numpy()
        return values.tolist() if as_rows else values if values.flags.writeable else values.copy()
    return column.to_pylist()


def _keys(table: Any, url: str | None, start: int) -> tuple[list[str] | None, Any]:
    """(the rows' keys: str(row in the file), or None without a `url`; the table without "__row__"):
    the rows are numbered from `start`, or by the "__row__" column a filter kept."""
    if "__row__" in table.column_names:
        return [str(r) for r in table.column("__row__").to_pylist()], table.drop(["__row__"])
    return (None if url is None else [str(r) for r in range(start, start + table.num_rows)]), table


def table_rows(table: Any, url: str | None, start: int, order: np.ndarray | None = None) -> list[dict]:
    """The rows of a pyarrow Table as dicts {column: value}, in `order` (None: as stored); with a `url`,
    each also has "__key__": str(its row in the file, `start` being the table's first) and "__url__"."""
    keys, table = _keys(table, url, start)
    columns = [column_values(column) for column in table.columns]
    if keys is None and not columns:
        rows = [{} for _ in range(table.num_rows)]
    elif keys is None:
        rows = rows_maker(tuple(table.column_names))(*columns)
    else:
        rows = rows_maker(("__key__", "__url__", *table.column_names))(keys, itertools.repeat(url), *columns)
    return rows if order is None else [rows[i] for i in order]


def table_batches(table: Any, size: int, url: str | None, start: int, order: np.ndarray | None = None) -> list[dict]:
    """The rows of a pyarrow Table in `order`, as batches of `size` rows (the last may be shorter):
    {column: numpy array or list, one item per row} (tensorcom.batch's dict batches); with a `url`,
    also "__key__": the rows' keys and "__url__": url."""
    keys, table = _keys(table, url, start)
    if order is not None:
        table = table.take(order)
        keys = None if keys is None else [keys[i] for i in order]
    columns = {name: column_values(table.column(name), as_rows=False) for name in table.column_names}
    batches = []
    for first in range(0, table.num_rows, size):
        batch = {name: values[first:first + size] for name, values in columns.items()}
        batches.append(batch if keys is None else {"__key__": keys[first:first + size], "__url__": url, **batch})
    return batches


@functools.lru_cache(maxsize=64)
def rows_maker(names: tuple[str, ...]) -> Callable[..., list[dict]]:
    """A function of len(names) columns returning their rows as [{names[0]: value, ...}, ...]: a list
    comprehension over a dict display made for these names (as collections.namedtuple makes its
    classes), so no function is called per row and each dict is built at its final size."""
    columns = [f"c{i}" for i in range(len(names))]
    values = [f"v{i}" for i in range(len(names))]
    row = ", ".join(f"{name!r}: {value}" for name, value in zip(names, values))
    return eval(f"lambda {', '.join(columns)}: [{{{row}}} for ({', '.join(values)},) in zip({', '.join(columns)})]")


class TableReader:
    """Samples of `units` in order (see the module docstring): each unit is read whole, filtered, and
    its rows (permuted by `shuffle_key` when given) handed out one by one."""

    def __init__(self, units: Sequence[TableUnit], *, kind: str, columns: Sequence[str] | None = None,
                 filter: Any = None, shuffle_key: tuple[int, int] | None = None, keys: bool = False,
                 batch_rows: int | None = None, **open_options: Any):
        self.keys, self.batch_rows = keys, batch_rows
        self.units, self.kind, self.columns = list(units), kind, None if columns is None else list(columns)
        self.filter, self.filter_columns = filter_expression(filter)
        self.shuffle_key, self.open_options = shuffle_key, open_options
        self.unit = self.row = 0  # self.row: rows of self.unit yielded before self._rows was read
        self._rows: list[dict] = []
        self._left: Any = iter(())  # what is left of self._rows
        self._files: dict[str, TableFile] = {}

    def __iter__(self) -> TableReader:
        return self

    def __next__(self) -> dict[str, Any]:
        try:
            return next(self._left)
        except StopIteration:
            return self._next_unit()

    def _next_unit(self) -> dict[str, Any]:
        """The first row of the next unit with rows left (its position restored), or StopIteration."""
        if self._rows:
            self._rows, self._left, self.unit, self.row = [], iter(()), self.unit + 1, 0
        while self.unit < len(self.units):
            rows = self._read(self.units[self.unit])
            if self.row < len(rows):
                self._rows, self._left = rows, iter(rows[self.row:])
                return next(self._left)
            self.unit, self.row = self.unit + 1, 0
        self.close()
        raise StopIteration

    def _read(self, unit: TableUnit) -> list[dict]:
        table_file = self._files.get(unit.url)
        if table_file is None:
            self.close()  # one file open at a time: units of a file are usually next to each other
            table_file = self._files[unit.url] = TableFile(unit.url, self.kind, **self.open_options)
        table = table_file.read(unit.index, self._columns_read())
        if self.filter is not None:
            if self.keys:
                pa = require("pyarrow")
                table = table.append_column("__row__", pa.array(np.arange(unit.start, unit.start + unit.rows)))
            table = table.filter(self.filter)
            if self.columns is not None:
                table = table.select([*self.columns, *(["__row__"] if self.keys else [])])
        order = None
        if self.shuffle_key is not None:
            seed, epoch = self.shuffle_key
            order = np.random.default_rng([seed, epoch, unit.index, unit.start, 0x7AB1E]).permutation(table.num_rows)
        url = unit.url if self.keys else None
        if self.batch_rows:
            return table_batches(table, self.batch_rows, url, unit.start, order)
        return table_rows(table, url, unit.start, order)

    def _columns_read(self) -> list[str] | None:
        """The columns to read: those asked for, plus those the filter needs (all, when not known)."""
        if self.columns is None or self.filter_columns is None:
            return None
        return [*self.columns, *(c for c in self.filter_columns if c not in self.columns)]

    def state_dict(self) -> dict[str, int]:
        """{"unit": index in this reader's list, "row": rows of it already yielded}."""
        if not self._rows:
            return {"unit": self.unit, "row": self.row}
        return {"unit": self.unit, "row": len(self._rows) - operator.length_hint(self._left)}

    def load_state_dict(self, state: dict[str, int] | None) -> None:
        """Continue after `state` (None: from the first unit); the unit is read again when next is called."""
        unit, row = (0, 0) if state is None else (int(state["unit"]), int(state["row"]))
        if not 0 <= unit <= len(self.units) or row < 0:
            raise ValueError(f"position {state!r} is outside this reader's {len(self.units)} units")
        self._rows, self._left, self.unit, self.row = [], iter(()), unit, row

    def close(self) -> None:
        files, self._files = self._files, {}
        for table_file in files.values():
            table_file.close()

