"""Hugging Face datasets as sources as they stand: Pipeline(Dataset) splits, shuffles and resumes by
index; Pipeline(IterableDataset) through the dataset's own state_dict; datasets built locally
(Dataset.from_dict, load_dataset("parquet", data_files=...)), offline: nothing reaches a hub."""

from __future__ import annotations

import json
import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"  # before datasets is imported: it reads them once
os.environ["HF_DATASETS_OFFLINE"] = "1"
datasets = pytest.importorskip("datasets")

from tensorcom import Pipeline  # noqa: E402
from tensorcom.pipeline.hf_sources import HFIterableSource, HFSource  # noqa: E402

ROWS = 23


def xs(pipeline):
    return [row["x"] for row in pipeline]


def row_x(row):
    return row["x"]


@pytest.fixture(scope="module")
def dataset():
    return datasets.Dataset.from_dict({"x": list(range(ROWS)), "b": [bytes([i]) for i in range(ROWS)]})


def test_a_dataset_splits_three_ways_into_the_whole_by_index(dataset):
    pipeline = Pipeline(dataset)
    assert isinstance(pipeline.source, HFSource) and len(pipeline) == ROWS
    assert xs(pipeline) == list(range(ROWS)) and next(iter(pipeline))["b"] == b"\x00"
    shuffled = Pipeline(HFSource(dataset, shuffle=True), seed=5)
    portions = [xs(shuffled.shard(w, 3)) for w in range(3)]
    assert [len(p) for p in portions] == [len(shuffled.shard(w, 3)) for w in range(3)] == [8, 8, 7]
    assert sorted(sum(portions, [])) == list(range(ROWS))
    assert xs(shuffled) != list(range(ROWS)) and xs(shuffled.set_epoch(1)) != xs(shuffled.set_epoch(0))
    nodes = [xs(Pipeline(HFSource(dataset, rank=r, world_size=2))) for r in range(2)]
    assert sorted(nodes[0] + nodes[1]) == list(range(ROWS)) and not set(nodes[0]) & set(nodes[1])


def test_a_dataset_resumes_at_its_index(dataset):
    def pipeline():
        return Pipeline(HFSource(dataset, shuffle=True, block=4), seed=1).shard(0, 2)

    full = xs(pipeline())
    first = pipeline()
    it = iter(first)
    head = [next(it)["x"] for _ in range(6)]
    state = json.loads(json.dumps(first.state_dict()))
    assert state["chain"] == {"position": 6}
    second = pipeline()
    second.load_state_dict(state)
    assert head + xs(second) == full


def test_a_dataset_dict_names_its_splits_and_a_split_is_a_source(dataset):
    splits = datasets.DatasetDict({"train": dataset, "test": dataset.select(range(3))})
    with pytest.raises(TypeError, match=r"\['test', 'train'\].*dataset\['test'\]"):
        Pipeline(splits)
    assert xs(Pipeline(splits["test"])) == [0, 1, 2]


@pytest.mark.procs
def test_load_dataset_from_local_parquet_in_two_processes(tmp_path, dataset):
    dataset.to_parquet(str(tmp_path / "d.parquet"))
    loaded = datasets.load_dataset("parquet", data_files=str(tmp_path / "d.parquet"), split="train",
                                   cache_dir=str(tmp_path / "cache"))
    pipeline = Pipeline(loaded, seed=3).map(row_x).parallel(2)
    assert sorted(pipeline) == list(range(ROWS))


def test_an_iterable_dataset_resumes_through_its_state_dict_and_splits_by_node(dataset):
    iterable = dataset.to_iterable_dataset(num_shards=4)
    pipeline = Pipeline(iterable)
    assert isinstance(pipeline.source, HFIterableSource)
    assert xs(pipeline) == list(range(ROWS))
    assert sorted(xs(pipeline.shard(0, 2)) + xs(pipeline.shard(1, 2))) == list(range(ROWS))
    first = Pipeline(iterable).shard(1, 2)
    it = iter(first)
    head = [next(it)["x"] for _ in range(4)]
    state = json.loads(json.dumps(first.state_dict()))
    second = Pipeline(iterable).shard(1, 2)
    second.load_state_dict(state)
    assert head + xs(second) == xs(Pipeline(iterable).shard(1, 2))
    shuffled = Pipeline(HFIterableSource(iterable, shuffle=True, buffer=8), seed=2)
    assert sorted(xs(shuffled)) == list(range(ROWS)) and xs(shuffled) != list(range(ROWS))
