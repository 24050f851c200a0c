"""The one conformance check every source and stage passes: iterate k items, save the state, build a
fresh one, load the state, iterate the rest → the uninterrupted sequence, for several k (inside
shuffle buffers, mid-shard, mid-batch, with helpers computing ahead).

REGISTRY names a factory for every node class and every Source class of the package; a test fails
when a class is missing, so a new source or stage cannot be forgotten. States go through JSON on
the way: they must be plain dicts, lists, strings and numbers.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import pkgutil

import numpy as np
import pytest

import tensorcom.pipeline
from tensorcom import shards
from tensorcom.images import ImageFolderSource
from tensorcom.pipeline import FetchSource, IterableSource, Mix, Node, PathSource, Pipeline, ShardSource, Source
from tensorcom.pipeline._node import Indexed, Replayed
from tensorcom.pipeline._pooled import MapPlan, Prefetched, WorkerMapped
from tensorcom.pipeline._shuffle import Shuffled
from tensorcom.pipeline._sliced import Sliced
from tensorcom.pipeline.function_source import FunctionSource
from tensorcom.pipeline.hf_sources import HFIterableSource, HFIterating, HFRows, HFSource
from tensorcom.pipeline.table_sources import ArrowSource, ParquetSource, TableSource
from tensorcom.pipeline.stage_times import StageClock
from tensorcom.pipeline.stages import Batched, Filtered, Mapped, Repeated, Unbatched
from worker_functions import plus_one  # imports nothing: what the worker processes import

N = 23


def numbers():
    """A module-level factory for FunctionSource."""
    return list(range(N))


def jitter(sample, rng):
    return {**sample, "r": float(rng.random())}


def odd(x):
    return x % 2 == 1


def items(n=N):
    return Indexed([{"__key__": f"k{i:02d}", "x": i} for i in range(n)], range(n))


def ints(n=N):
    return Indexed(list(range(n)), range(n))


class Reiterable:
    """An iterable with no len or indexing: resumed by replaying it."""

    def __iter__(self):
        return iter(range(N))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """5 shards of 5 samples, 6 plain files, and an image-folder tree of 2 × 4 files."""
    root = tmp_path_factory.mktemp("conformance")
    with shards.ShardWriter(str(root / "d-%02d.tar"), maxcount=5) as writer:
        for i in range(25):
            writer.write({"__key__": f"s{i:02d}", "cls": i})
    for i in range(6):
        (root / f"f{i}.bin").write_bytes(bytes([i]) * 3)
    for label in ("a", "b"):
        (root / "tree" / label).mkdir(parents=True)
        for i in range(4):
            (root / "tree" / label / f"{i}.jpg").write_bytes(f"{label}{i}".encode())
    return root


def source_node(source, seed=1, epoch=2, worker=0, num_workers=1):
    return source.open(seed=seed, epoch=epoch, worker=worker, num_workers=num_workers)


def table_file(data, kind):
    """A Parquet file of 23 rows in row groups of 5 (its Arrow IPC twin in record batches of 5), written once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = data / f"table.{kind}"
    if not path.exists():
        table = pa.table({"x": np.arange(N), "odd": np.arange(N) % 2 == 1})
        if kind == "parquet":
            pq.write_table(table, path, row_group_size=5)
        else:
            with pa.ipc.new_file(path, table.schema) as writer:
                for batch in table.to_batches(max_chunksize=5):
                    writer.write_batch(batch)
    return str(path)


def hf_dataset():
    """A Hugging Face Dataset of N rows {"x": i}, built here (offline: nothing reaches a hub)."""
    os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    import datasets

    return datasets.Dataset.from_dict({"x": list(range(N))})


def shard_urls(data):
    return f"{data}/d-{{00..04}}.tar"


REGISTRY = {
    # sources and source nodes
    "Indexed": lambda data: Indexed(list(range(N)), np.random.default_rng(0).permutation(N)),
    "Replayed": lambda data: Replayed(lambda: iter(range(N))),
    "IterableSource": lambda data: source_node(IterableSource(list(range(N)), shuffle=True)),
    "IterableSource/reiterable": lambda data: source_node(IterableSource(Reiterable()), worker=1, num_workers=2),
    "PathSource": lambda data: source_node(PathSource(sorted(map(str, data.glob("*.bin"))), shuffle=True)),
    "FetchSource": lambda data: source_node(FetchSource(sorted(map(str, data.glob("*.bin"))), threads=3)),
    "ShardSource": lambda data: source_node(ShardSource(shard_urls(data), shuffle=True)),
    "ShardSource/resampled": lambda data: source_node(ShardSource(shard_urls(data), resampled=True)),
    "ShardReader": lambda data: shards.samples(shard_urls(data), rank=0, world_size=1, worker=0, num_workers=1),
    "ImageFolderSource": lambda data: source_node(ImageFolderSource(str(data / "tree"), shuffle=True)),
    "FunctionSource": lambda data: source_node(FunctionSource(f"{__file__}:numbers")),
    "ParquetSource": lambda data: source_node(ParquetSource(table_file(data, "parquet"), shuffle=True)),
    "ArrowSource": lambda data: source_node(ArrowSource(table_file(data, "arrow"), filter=[("odd", False)]), 3, 1, 1, 2),
    "TableSource": lambda data: source_node(TableSource(table_file(data, "parquet"), columns=["x"]), worker=1, num_workers=2),
    "HFSource": lambda data: source_node(HFSource(hf_dataset(), shuffle=True, block=4)),
    "HFRows": lambda data: HFRows(hf_dataset(), list(range(N))[::-1], 5),
    "HFIterableSource": lambda data: source_node(HFIterableSource(hf_dataset().to_iterable_dataset(num_shards=3)), 0, 0, 1, 2),
    "HFIterating": lambda data: HFIterating(hf_dataset().to_iterable_dataset()),
    "Mix": lambda data: iter(Pipeline.mix([IterableSource(list(range(N)), shuffle=True), ShardSource(shard_urls(data))],
                                          [2, 1], seed=3, policy="exact", window=5, on_end="drop")),
    "Mixed": lambda data: source_node(Mix({"a": range(N), "b": Pipeline(range(50, 60)).shuffle(3)}, {"a": 1, "b": 2})),
    "Mixed/resample": lambda data: iter(Pipeline.mix([range(5), range(50, 60)], [1, 1], on_end="resample").take(30)),
    # stages
    "Mapped": lambda data: Mapped(items(), jitter, (1, 0, 0, 3)),
    "Timed": lambda data: StageClock().timed(Mapped(items(), jitter, (1, 0, 0, 3)), "jitter"),
    "Filtered": lambda data: Filtered(ints(), odd),
    "Sliced/take": lambda data: iter(Pipeline(range(N)).take(9)),
    "Batched": lambda data: Batched(ints(), 4),
    "Unbatched": lambda data: Unbatched(Batched(ints(), 4)),
    "Repeated": lambda data: Repeated(lambda epoch: Shuffled(ints(7), 3, (0, epoch, 0, 0)), 3, 5),
    "Shuffled": lambda data: Shuffled(items(), 7, (4, 0, 0, 1)),
    "Sliced": lambda data: Sliced(ints(), 2, 19, 3),
    "WorkerMapped": lambda data: WorkerMapped(items(), jitter, MapPlan(3, rng_key=(1, 0, 0, 2))),
    "WorkerMapped/processes": lambda data: WorkerMapped(ints(), plus_one, MapPlan(2, processes=True)),
    "Prefetched": lambda data: Prefetched(Shuffled(ints(), 5, (0, 0, 0, 0)), 3),
    "Parallel": lambda data: iter(Pipeline(range(N)).map(plus_one).batch(3).parallel(3, processes=False)),
    "Parallel/processes": lambda data: iter(Pipeline(range(N)).shuffle(4).parallel(2)),
}
UNORDERED = {"WorkerMapped/unordered": lambda data: WorkerMapped(ints(), plus_one, MapPlan(3, ordered=False))}
STOPS = (0, 1, 3, 6, 11, 17)  # Shuffled(7) yields its first item after taking 8: 1..6 stand inside the fill


def plain(x):
    """Arrays → lists, so items compare with ==."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


def run_in_two(make, stop):
    """(items before the checkpoint, items of a fresh node restored from it)."""
    node = make()
    head = [plain(x) for x in itertools.islice(node, stop)]
    state = json.loads(json.dumps(node.state_dict()))
    node.close() if hasattr(node, "close") else None
    fresh = make()
    fresh.load_state_dict(state)
    return head, [plain(x) for x in fresh]


def checkpointed(node, stops):
    """One pass of `node` whose state is saved before its first item (stop 0) and after each of `stops`
    items: (its items, {stop: state})."""
    save = lambda: json.loads(json.dumps(node.state_dict()))  # noqa: E731
    items, states = [], {0: save()} if 0 in stops else {}
    for item in node:
        items.append(plain(item))
        if len(items) in stops:
            states[len(items)] = save()
    node.close() if hasattr(node, "close") else None
    return items, states


# the process pools, started once per node: one pass saves every checkpoint; its threads twin gives the order
TWINS = {"WorkerMapped/processes": lambda: list(range(1, N + 1)),
         "Parallel/processes": lambda: list(Pipeline(range(N)).shuffle(4).parallel(2, processes=False))}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_save_restore_gives_the_remaining_sequence(data, name):
    make = lambda: REGISTRY[name](data)
    if name in TWINS:
        full, states = checkpointed(make(), STOPS[::2] + (N - 1, N))
        assert full == TWINS[name]() and sorted(states) == sorted(STOPS[::2] + (N - 1, N)), name
        for stop, state in states.items():
            fresh = make()
            fresh.load_state_dict(state)
            assert full[:stop] + [plain(x) for x in fresh] == full, (name, stop)
        return
    full = [plain(x) for x in make()]
    assert len(full) > 3, name
    for stop in STOPS + (len(full) - 1, len(full)):
        head, tail = run_in_two(make, stop)
        assert head + tail == full, (name, stop)


@pytest.mark.timeout(120)
def test_an_unordered_map_resumes_without_duplicates_or_gaps(data):
    make = lambda: UNORDERED["WorkerMapped/unordered"](data)
    for stop in STOPS:
        head, tail = run_in_two(make, stop)
        assert sorted(head + tail) == list(range(1, N + 1)), stop


def _classes_of(base):
    found, todo = set(), [base]
    while todo:
        for cls in todo.pop().__subclasses__():
            if cls.__module__.startswith("tensorcom.") and cls not in found:
                found.add(cls)
                todo.append(cls)
    return found


def test_the_registry_names_every_source_and_stage():
    for module in pkgutil.iter_modules(tensorcom.pipeline.__path__, "tensorcom.pipeline."):
        importlib.import_module(module.name)
    classes = _classes_of(Node) | _classes_of(Source) | {shards.ShardReader}
    named = {name.split("/")[0] for name in REGISTRY} | {"Helped", "Passing", "Counting"}  # bases of other nodes
    missing = sorted(cls.__name__ for cls in classes if cls.__name__ not in named)
    assert missing == [], f"add these to REGISTRY in {__file__}: {missing}"
