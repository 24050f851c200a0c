"""ParquetSource and ArrowSource: files written by pyarrow and by pandas, several row groups, split
between workers and nodes by row group (the portions make up the whole), len from the metadata,
shuffles per epoch, exact resume in the middle of a row group, S3 (moto) and HTTP, decode of image
bytes, and a corrupt file named in the error."""

from __future__ import annotations

import json

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from tensorcom import Pipeline  # noqa: E402
from tensorcom.errors import ShardError  # noqa: E402
from tensorcom.imagecodec import encode_image  # noqa: E402
from tensorcom.pipeline import ArrowSource, ParquetSource  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two Parquet files (pyarrow: 3 row groups of 5 + 2 rows; pandas: 1 row group of 8), their Arrow IPC twin."""
    root = tmp_path_factory.mktemp("table-sources")
    images = [encode_image(np.full((4, 5, 3), i, np.uint8), "png") for i in range(17)]
    pq.write_table(pa.table({"id": np.arange(17), "png": images}), root / "a.parquet", row_group_size=5)
    pandas = pytest.importorskip("pandas")
    pandas.DataFrame({"id": np.arange(100, 108), "label": [f"l{i % 3}" for i in range(8)]}).to_parquet(
        root / "b.parquet", index=False)
    with pa.ipc.new_file(root / "a.arrow", pq.read_schema(root / "a.parquet")) as writer:
        for batch in pq.read_table(root / "a.parquet").combine_chunks().to_batches(max_chunksize=6):
            writer.write_batch(batch)
    return root


def ids(pipeline):
    return [sample["id"] for sample in pipeline]


def test_two_files_by_pyarrow_and_pandas_in_order_with_len(files):
    source = ParquetSource([str(files / "a.parquet"), str(files / "b.parquet")])
    assert len(source) == 25 and len(Pipeline(source)) == 25
    assert ids(Pipeline(source)) == list(range(17)) + list(range(100, 108))
    sample = next(iter(Pipeline(ParquetSource(str(files / "a.parquet"))).decode("rgb8")))
    assert sample["png"].shape == (4, 5, 3) and sample["png"].dtype == np.uint8


def test_three_workers_by_row_group_make_the_whole(files):
    source = ParquetSource(f"{files}/{{a,b}}.parquet", shuffle=True)
    whole = ids(Pipeline(source, seed=4))
    portions = [ids(Pipeline(source, seed=4).shard(w, 3)) for w in range(3)]
    assert sorted(sum(portions, [])) == sorted(whole) == list(range(17)) + list(range(100, 108))
    assert [len(p) for p in portions] == [len(Pipeline(source).shard(w, 3)) for w in range(3)]
    assert ids(Pipeline(source, seed=4).set_epoch(1)) != whole  # a new order each epoch
    nodes = [ids(Pipeline(ParquetSource(f"{files}/{{a,b}}.parquet", rank=r, world_size=2))) for r in range(2)]
    assert sorted(sum(nodes, [])) == sorted(whole)
    with pytest.raises(ValueError, match="gets none of the 5 row groups"):
        next(iter(Pipeline(source).shard(5, 6)))


def test_resume_in_the_middle_of_a_row_group(files):
    def pipeline():
        return Pipeline(ParquetSource(str(files / "a.parquet"), shuffle=True), seed=2).shard(1, 2)

    full = ids(pipeline())
    first = pipeline()
    it = iter(first)
    head = [next(it)["id"] for _ in range(3)]
    state = json.loads(json.dumps(first.state_dict()))
    assert state["chain"]["row"] == 3  # inside the first row group of 5
    second = pipeline()
    second.load_state_dict(state)
    assert head + ids(second) == full


def test_batches_of_rows_resume_and_count(files):
    def pipeline():
        return Pipeline(ParquetSource(str(files / "a.parquet"), batch_rows=2, shuffle=True), seed=1)

    batches = list(pipeline())
    assert len(pipeline()) == len(batches) == 3 + 3 + 3 + 1  # row groups of 5, 5, 5, 2
    assert sorted(np.concatenate([b["id"] for b in batches]).tolist()) == list(range(17))
    assert batches[0]["id"].dtype == np.int64 and isinstance(batches[0]["png"], list)
    first = pipeline()
    it = iter(first)
    head = [next(it) for _ in range(4)]
    state = json.loads(json.dumps(first.state_dict()))
    second = pipeline()
    second.load_state_dict(state)
    assert [b["id"].tolist() for b in head + list(second)] == [b["id"].tolist() for b in batches]
    with pytest.raises(ValueError, match="batch_rows"):
        ParquetSource(str(files / "a.parquet"), batch_rows=0)


def test_filter_and_columns(files):
    source = ParquetSource(str(files / "b.parquet"), columns=["id"], filter=[("label", "l1")])
    assert list(Pipeline(source)) == [{"id": 101}, {"id": 104}, {"id": 107}]
    keyed = ParquetSource(str(files / "b.parquet"), columns=["id"], filter=[("label", "l1")], keys=True)
    assert [s["__key__"] for s in Pipeline(keyed)] == ["1", "4", "7"]  # rows of the file, before the filter
    with pytest.raises(TypeError, match="length is unknown"):
        len(Pipeline(source))


def test_arrow_ipc_files(files):
    source = ArrowSource(str(files / "a.arrow"))
    assert len(source) == 17 and len(source.units()) == 3
    assert sorted(ids(Pipeline(source).shard(0, 2)) + ids(Pipeline(source).shard(1, 2))) == list(range(17))


def test_a_corrupt_file_is_a_shard_error_naming_it(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really a parquet file PAR1")
    with pytest.raises(ShardError) as info:
        list(Pipeline(ParquetSource(str(tmp_path / "bad.parquet"))))
    assert info.value.url == str(tmp_path / "bad.parquet")


@pytest.mark.net
@pytest.mark.procs
def test_over_s3_and_http(files, s3_server, http_server):
    client = s3_server.client()
    client.create_bucket(Bucket="tables")
    client.put_object(Bucket="tables", Key="a.parquet", Body=(files / "a.parquet").read_bytes())
    (http_server.root / "b.parquet").write_bytes((files / "b.parquet").read_bytes())
    source = ParquetSource(["s3://tables/a.parquet", f"{http_server.url}/b.parquet"])
    assert len(source) == 25
    assert ids(Pipeline(source).shard(1, 2)) == [5, 6, 7, 8, 9, 15, 16]  # row groups 1 and 3 of a
    assert ids(Pipeline(source).shard(0, 2))[-8:] == list(range(100, 108))
