"""The Pipeline API: chaining, lengths, epochs, seeds, shards, parallel maps, pickling."""

import os
import pickle

import numpy as np
import pytest

from tensorcom.errors import WorkerError
from tensorcom.pipeline import Pipeline


def square(x):
    return x * x


def is_even(x):
    return x % 2 == 0


def jitter(x, rng):
    return x + rng.random()


def crop(sample, rng):
    """A stand-in for a random augmentation: a random window of the sample's array."""
    start = int(rng.integers(0, 8))
    return {**sample, "img": sample["img"][start:start + 4]}


def explode(sample):
    raise RuntimeError(f"bad sample {sample['__key__']}")


def make_samples(n):
    return [{"__key__": f"k{i:03d}", "img": np.arange(12, dtype=np.uint8) + i, "cls": i % 3} for i in range(n)]


def test_chain_is_lazy_and_immutable():
    base = Pipeline(range(10))
    squared = base.map(square)
    assert list(base) == list(range(10))
    assert list(squared) == [x * x for x in range(10)]
    assert list(squared.filter(is_even).take(3)) == [0, 4, 16]
    assert "map" in repr(squared) and "filter" not in repr(squared)


def test_batch_of_dicts_and_to_tuple():
    p = Pipeline(make_samples(10)).to_tuple("img", "cls").batch(4)
    batches = list(p)
    assert len(p) == 3 == len(batches)
    images, labels = batches[0]
    assert images.shape == (4, 12) and images.dtype == np.uint8 and labels.tolist() == [0, 1, 2, 0]
    assert len(Pipeline(range(10)).batch(4, partial=False)) == 2
    d = next(iter(Pipeline(make_samples(5)).select("cls").batch(5)))
    assert d == {"cls": d["cls"], "__key__": [f"k{i:03d}" for i in range(5)]} and d["cls"].tolist() == [0, 1, 2, 0, 1]


def test_unbatch_rebatch_and_unknown_lengths():
    p = Pipeline(range(20)).batch(3).unbatch()
    assert list(p) == list(range(20))
    assert [len(b) for b in Pipeline(range(20)).batch(3).rebatch(8)] == [8, 8, 4]
    for unknown in (Pipeline(range(5)).filter(is_even), Pipeline(iter(range(5))), Pipeline(range(5)).repeat()):
        with pytest.raises(TypeError, match="unknown"):
            len(unknown)
    assert len(Pipeline(range(5)).map(square).take(3)) == 3
    assert len(Pipeline(range(5)).repeat(3)) == 15


def test_seed_epoch_reproducibility():
    p = Pipeline(range(50), seed=3).shuffle(10).map(jitter, rng=True)
    first, again = list(p), list(p)
    assert first == again
    assert list(Pipeline(range(50), seed=3).shuffle(10).map(jitter, rng=True)) == first
    assert list(p.set_epoch(1)) != first
    assert list(Pipeline(range(50), seed=4).shuffle(10).map(jitter, rng=True)) != first


@pytest.mark.procs
def test_randomness_independent_of_workers_and_order():
    samples = make_samples(24)
    inline = list(Pipeline(samples, seed=9).map(crop, rng=True))
    threads = list(Pipeline(samples, seed=9).map(crop, rng=True, workers=3, ordered=False))
    procs = list(Pipeline(samples, seed=9).map(crop, rng=True, workers=2, processes=True))
    key = lambda s: s["__key__"]  # noqa: E731
    assert [s["img"].tolist() for s in procs] == [s["img"].tolist() for s in inline]
    assert [s["img"].tolist() for s in sorted(threads, key=key)] == [s["img"].tolist() for s in inline]


def test_shards_are_disjoint_and_cover_everything():
    p = Pipeline(range(23), seed=1).map(square)
    parts = [list(p.shard(i, 4)) for i in range(4)]
    assert sorted(sum(parts, [])) == sorted(x * x for x in range(23))
    assert [len(p.shard(i, 4)) for i in range(4)] == [len(part) for part in parts]
    with pytest.raises(ValueError):
        p.shard(4, 4)


def test_repeat_runs_distinct_epochs():
    p = Pipeline(list(range(6)), seed=2).shuffle(6).repeat(3)
    out = list(p)
    assert len(out) == 18 and all(sorted(out[i:i + 6]) == list(range(6)) for i in (0, 6, 12))
    assert out[:6] != out[6:12] or out[6:12] != out[12:]
    assert list(Pipeline(iter(range(3))).repeat()) == [0, 1, 2]  # a one-shot iterator ends instead of spinning


def test_prefetch_and_thread_map_keep_order():
    p = Pipeline(range(200)).map(square, workers=4).prefetch(4).batch(50)
    assert np.concatenate(list(p)).tolist() == [x * x for x in range(200)]


def test_inline_error_keeps_its_type_and_notes_the_key():
    with pytest.raises(RuntimeError) as info:
        list(Pipeline(make_samples(3)).map(explode))
    assert info.value.tensorcom_key == "k000"


@pytest.mark.procs
def test_process_map_error_is_a_worker_error_with_key():
    with pytest.raises(WorkerError) as info:
        list(Pipeline(make_samples(3)).map(explode, workers=2, processes=True))
    assert info.value.key in {"k000", "k001", "k002"} and "explode" in info.value.remote_traceback


def test_bad_arguments_name_the_value():
    p = Pipeline(range(3))
    with pytest.raises(TypeError, match="module-level"):
        p.map(lambda x: x, workers=1, processes=True)
    with pytest.raises(ValueError, match="-1"):
        p.batch(-1)
    with pytest.raises(ValueError, match="processes=True"):
        p.map(square, processes=True)
    with pytest.raises(TypeError, match="callable"):
        p.filter(3)
    with pytest.raises(TypeError, match="iterable"):
        Pipeline(5)
    with pytest.raises(ValueError, match="seed"):
        Pipeline(range(3), seed=-1)


def test_pipelines_pickle_when_built_from_module_level_parts():
    p = Pipeline(make_samples(8), seed=5).map(crop, rng=True).to_tuple("img", "cls").batch(4).shard(1, 2)
    clone = pickle.loads(pickle.dumps(p))
    assert [b[0].tolist() for b in clone] == [b[0].tolist() for b in p]


def check_forked_dataloader_workers_take_disjoint_portions():
    """Forked workers (run by test_resume.test_forked_dataloader_workers, in an interpreter of its own
    with the other forking checks); spawned ones: test_resume's DataLoader over a pipeline of a
    ShardDataset."""
    torch = pytest.importorskip("torch")
    from tensorcom.adapters.torch import iterable_dataset

    dataset = iterable_dataset(Pipeline(range(20)).map(square))
    assert isinstance(dataset, torch.utils.data.IterableDataset) and len(dataset) == 20
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2,
                                         multiprocessing_context="fork", timeout=60)
    assert sorted(int(x) for x in loader) == [x * x for x in range(20)]


def augment_image(sample, rng):
    from tensorcom.images import RandomResizedCrop

    return RandomResizedCrop(32)(sample["jpg"], rng), np.int32(sample["cls"])


def test_image_folder_to_augmented_batches(tmp_path):
    from PIL import Image

    from tensorcom.images import ImageFolderSource

    for label, color in enumerate([(255, 0, 0), (0, 0, 255)]):
        (tmp_path / f"c{label}").mkdir()
        for i in range(4):
            Image.new("RGB", (80, 60), color).save(tmp_path / f"c{label}" / f"{i}.jpg", quality=95)
    p = Pipeline(ImageFolderSource(str(tmp_path), shuffle=True), seed=1).map(augment_image, rng=True, workers=2).batch(4)
    batches = list(p)
    assert len(batches) == len(p) == 2
    images, labels = batches[0]
    assert images.shape == (4, 32, 32, 3) and images.dtype == np.uint8 and labels.dtype == np.int32
    red = images[:, :, :, 0].mean(axis=(1, 2)) > 128
    assert (red == (labels == 0)).all()  # pixels and labels stay together
    again = list(Pipeline(ImageFolderSource(str(tmp_path), shuffle=True), seed=1).map(augment_image, rng=True).batch(4))
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(batches, again))


def pid_of_worker(x):
    return os.getpid()


@pytest.mark.procs
def test_persistent_map_keeps_its_processes_across_epochs():
    with Pipeline(range(12)).map(pid_of_worker, workers=2, processes=True, persistent=True) as p:
        first = set(p.set_epoch(0))
        second = set(p.set_epoch(1))
        assert os.getpid() not in first and len(first | second) <= 2  # two processes served both epochs
        clone = pickle.loads(pickle.dumps(p))  # the pool stays behind
        assert clone._pools == {}
    assert all(pool._workers.closed for pool in p._pools.values())


def test_a_pipeline_continues_another_and_its_state_checks_the_seed():
    base = Pipeline(range(10), seed=7).shuffle(4)
    more = Pipeline(base).batch(5)
    assert more.seed == 7 and np.concatenate(list(more)).tolist() == list(base)
    it = iter(more)
    next(it)
    state = more.state_dict()
    assert state["seed"] == 7 and state["epoch"] == 0 and state["chain"]["up"]["yielded"] == 5
    with pytest.raises(ValueError, match="seed 7"):
        Pipeline(range(10), seed=8).shuffle(4).batch(5).load_state_dict(state)
    again = Pipeline(base).batch(5)
    again.load_state_dict(state)
    assert [b.tolist() for b in again] == [b.tolist() for b in list(more)[1:]]


def test_shard_dataset_rejects_bad_counts_naming_the_value():
    from tensorcom.pipeline import ShardDataset

    with pytest.raises(ValueError, match="epochs must be an int >= 1, got 0"):
        ShardDataset("d-{00..01}.tar", epochs=0)
    with pytest.raises(ValueError, match="shuffle_buffer must be an int >= 0, got -1"):
        ShardDataset("d-{00..01}.tar", shuffle_buffer=-1)
    with pytest.raises(ValueError, match="select needs one or more field names, got"):
        Pipeline(range(3)).select()
