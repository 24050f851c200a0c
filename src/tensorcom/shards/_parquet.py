"""Parquet shards, the output of `tensorcom shard --format parquet` (pyarrow imported when used).

    write_parquet_shard(path, rows)    rows (key, [(field, bytes)]) -> one Parquet file, written atomically
    parquet_rows(path)                 the row count of a Parquet file, from its metadata
"""

from __future__ import annotations

import io
from typing import Iterable

from tensorcom.shards._destinations import open_destination


def write_parquet_shard(path: str, rows: Iterable[tuple[str, list[tuple[str, bytes]]]]) -> int:
    """Write rows (key, [(field, bytes)]) as one Parquet file at `path` (atomically): a string column
    "__key__" and a binary column per field (null where a row lacks it). Returns the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys: list[str] = []
    columns: dict[str, list[bytes | None]] = {}
    for key, fields in rows:
        for name, data in fields:
            columns.setdefault(name, [None] * len(keys)).append(data)
        keys.append(key)
        for values in columns.values():
            values.extend([None] * (len(keys) - len(values)))
    table = pa.table({"__key__": pa.array(keys, pa.string()),
                      **{name: pa.array(columns[name], pa.binary()) for name in sorted(columns)}})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    dest = open_destination(path)
    try:
        dest.write(buffer.getbuffer())
        dest.commit()
    except BaseException:
        dest.discard()
        raise
    return len(keys)


def parquet_rows(path: str) -> int:
    """Rows in the Parquet file at `path`."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows
