"""tensorcom.shards.tables: row-group units from the footer, values by column type, readers that
resume in the middle of a row group, ranged HTTP reads, and errors that name the URL and row group."""

from __future__ import annotations

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from tensorcom.errors import OpenError, ShardError  # noqa: E402
from tensorcom.shards.tables import TableReader, filter_expression, table_batches, table_rows, table_units  # noqa: E402

ROWS = 20


def table():
    return pa.table({
        "id": np.arange(ROWS, dtype=np.int64),
        "txt": [f"row {i}" for i in range(ROWS)],
        "jpg": [bytes([i]) * 4 for i in range(ROWS)],
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(3 * ROWS, dtype=np.float32)), 3),
        "tags": [[i] * (i % 3) for i in range(ROWS)],
    })


@pytest.fixture(scope="module")
def parquet_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tables") / "t.parquet"
    pq.write_table(table(), path, row_group_size=6)  # row groups of 6, 6, 6, 2
    return str(path)


def test_units_come_from_the_footer_and_values_keep_their_types(parquet_file):
    units = table_units([parquet_file], "parquet")
    assert [(u.index, u.rows, u.start) for u in units] == [(0, 6, 0), (1, 6, 6), (2, 6, 12), (3, 2, 18)]
    assert list(TableReader(units, kind="parquet", columns=["id"]))[:2] == [{"id": 0}, {"id": 1}]
    rows = list(TableReader(units, kind="parquet", keys=True))
    assert [r["id"] for r in rows] == list(range(ROWS))
    row = rows[7]
    assert row["__key__"] == "7" and row["__url__"] == parquet_file
    assert row["txt"] == "row 7" and row["jpg"] == b"\x07" * 4 and row["tags"] == [7]
    assert isinstance(row["vec"], np.ndarray) and row["vec"].tolist() == [21.0, 22.0, 23.0]


def test_tensor_columns_are_arrays(tmp_path):
    tensors = pa.FixedShapeTensorArray.from_numpy_ndarray(np.arange(24, dtype=np.uint8).reshape(4, 2, 3))
    pq.write_table(pa.table({"x": tensors}), tmp_path / "x.parquet")
    rows = list(TableReader(table_units([str(tmp_path / "x.parquet")], "parquet"), kind="parquet"))
    assert rows[1]["x"].shape == (2, 3) and rows[1]["x"].tolist() == [[6, 7, 8], [9, 10, 11]]


def test_a_reader_resumes_inside_a_row_group_reading_only_that_one(parquet_file, monkeypatch):
    units = table_units([parquet_file], "parquet")
    full = [r["id"] for r in TableReader(units, kind="parquet", shuffle_key=(3, 1))]
    assert sorted(full) == list(range(ROWS)) and full != list(range(ROWS))
    reader = TableReader(units, kind="parquet", shuffle_key=(3, 1))
    head = [next(reader)["id"] for _ in range(9)]
    state = reader.state_dict()
    assert state == {"unit": 1, "row": 3}
    fresh = TableReader(units, kind="parquet", shuffle_key=(3, 1))
    fresh.load_state_dict(state)
    read = []
    original = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", lambda self, i, **kw: read.append(i) or original(self, i, **kw))
    assert head + [r["id"] for r in fresh] == full
    assert read == [1, 2, 3]  # the row group of the checkpoint again, none before it


def test_filters_and_columns(parquet_file):
    units = table_units([parquet_file], "parquet")
    rows = list(TableReader(units, kind="parquet", columns=["id"], filter=[("txt", "row 13")], keys=True))
    assert rows == [{"__key__": "13", "__url__": parquet_file, "id": 13}]
    expression, needs = filter_expression(pa.compute.field("id") >= 17)
    assert needs is None
    assert [r["id"] for r in TableReader(units, kind="parquet", columns=["id"], filter=expression)] == [17, 18, 19]
    with pytest.raises(TypeError, match="filter"):
        filter_expression("id == 3")


def test_a_missing_column_names_the_url(parquet_file):
    reader = TableReader(table_units([parquet_file], "parquet"), kind="parquet", columns=["id", "nope"])
    with pytest.raises(ShardError, match="no column 'nope'") as info:
        next(reader)
    assert info.value.url == parquet_file


def test_corrupt_and_truncated_files_name_the_url_and_row_group(parquet_file, tmp_path):
    data = open(parquet_file, "rb").read()
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ShardError, match="cannot read this parquet file") as info:
        table_units([str(truncated)], "parquet")
    assert info.value.url == str(truncated)
    units = table_units([parquet_file], "parquet")
    start = pq.ParquetFile(parquet_file).metadata.row_group(2).column(0).data_page_offset
    corrupt = bytearray(data)
    corrupt[start: start + 40] = b"\xff" * 40  # garbage in row group 2's first page header
    bad = tmp_path / "corrupt.parquet"
    bad.write_bytes(bytes(corrupt))
    units = table_units([str(bad)], "parquet")
    reader = TableReader(units, kind="parquet")
    with pytest.raises(ShardError) as info:
        list(reader)
    assert info.value.url == str(bad) and info.value.member.startswith("row group ")
    with pytest.raises(OpenError):
        table_units([str(tmp_path / "missing.parquet")], "parquet")


def test_arrow_ipc_units_are_record_batches(tmp_path):
    path = tmp_path / "t.arrow"
    with pa.ipc.new_file(path, table().schema) as writer:
        for batch in table().to_batches(max_chunksize=8):
            writer.write_batch(batch)
    units = table_units([str(path)], "arrow")
    assert [(u.rows, u.start) for u in units] == [(8, 0), (8, 8), (4, 16)]
    rows = list(TableReader(units[1:], kind="arrow", columns=["id", "jpg"]))
    assert [r["id"] for r in rows] == list(range(8, ROWS)) and rows[0]["jpg"] == b"\x08" * 4


@pytest.mark.net
def test_http_files_are_read_with_ranged_requests(parquet_file, http_server):
    (http_server.root / "tables").mkdir(exist_ok=True)
    (http_server.root / "tables" / "t.parquet").write_bytes(open(parquet_file, "rb").read())
    url = f"{http_server.url}/tables/t.parquet"
    units = table_units([url], "parquet")
    assert len(units) == 4
    before = http_server.requests["/tables/t.parquet"]
    assert [r["id"] for r in TableReader(units[3:], kind="parquet")] == [18, 19]
    requests = http_server.requests["/tables/t.parquet"] - before
    assert 1 <= requests <= 4  # the footer and the last row group's range, not a read from byte 0


def test_rows_and_batches_of_a_table():
    assert table_rows(table().slice(0, 0), "u", 0) == []
    batches = table_batches(table(), 8, "u", 0, order=np.arange(ROWS)[::-1])
    assert [len(b["id"]) for b in batches] == [8, 8, 4] and batches[0]["id"].tolist() == list(range(19, 11, -1))
    assert batches[0]["vec"].shape == (8, 3) and batches[0]["vec"][0].tolist() == [57.0, 58.0, 59.0]
    assert batches[2]["__key__"] == ["3", "2", "1", "0"] and batches[2]["__url__"] == "u"
    assert batches[2]["txt"] == ["row 3", "row 2", "row 1", "row 0"] and batches[1]["tags"][0] == [11, 11]
