"""Stages are plain generators: each is checked on its own, with the conformance check every stage passes."""

import numpy as np
import pytest

from tensorcom.pipeline import stages


def double(x):
    return 2 * x


def conformance(stage, inputs, expected):
    """Every stage: lazy (nothing consumed before next()), same output on a rebuilt chain, exact output."""
    consumed = []

    def source():
        for x in inputs:
            consumed.append(x)
            yield x

    gen = stage(source())
    assert consumed == []
    first = list(gen)
    assert _same(first, expected)
    assert _same(list(stage(iter(inputs))), first)


def _same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_conformance_of_every_stage():
    conformance(lambda s: stages.mapping(s, double), [1, 2], [2, 4])
    conformance(lambda s: stages.filtering(s, lambda x: x % 2), range(5), [1, 3])
    conformance(lambda s: stages.selecting(s, ["a"]), [{"__key__": "k", "a": 1, "b": 2}], [{"a": 1, "__key__": "k"}])
    conformance(lambda s: stages.tupling(s, ["png;jpg", "cls"]), [{"jpg": b"x", "cls": 3}], [(b"x", 3)])
    conformance(lambda s: stages.shuffling(s, 3, np.random.default_rng(5)), range(6),
                list(stages.shuffling(range(6), 3, np.random.default_rng(5))))
    conformance(lambda s: stages.batching(s, 2), [1, 2, 3], [np.array([1, 2]), np.array([3])])
    conformance(lambda s: stages.unbatching(s), [np.arange(2), np.arange(1)], [0, 1, 0])
    conformance(lambda s: stages.rebatching(s, 3), [np.arange(2), np.arange(2)], [np.array([0, 1, 0]), np.array([1])])
    conformance(lambda s: stages.taking(s, 2), range(5), [0, 1])
    conformance(lambda s: stages.striding(s, 1, 3), range(7), [1, 4])


def test_mapping_with_rngs_and_key_note():
    out = list(stages.mapping([1, 2], lambda x, rng: x + rng.integers(10), lambda i: np.random.default_rng(i)))
    assert out == [1 + np.random.default_rng(0).integers(10), 2 + np.random.default_rng(1).integers(10)]
    with pytest.raises(ZeroDivisionError) as info:
        list(stages.mapping([{"__key__": "bad", "x": 0}], lambda s: 1 / s["x"]))
    assert info.value.tensorcom_key == "bad"
    assert any("bad" in note for note in info.value.__notes__)


def test_shuffle_is_a_permutation_and_seeded():
    a = list(stages.shuffling(range(100), 10, stages.sample_rng(1, 0, 0, 0, 0)))
    b = list(stages.shuffling(range(100), 10, stages.sample_rng(1, 0, 0, 0, 0)))
    c = list(stages.shuffling(range(100), 10, stages.sample_rng(1, 1, 0, 0, 0)))
    assert sorted(a) == list(range(100)) and a == b and a != c and a != list(range(100))


def test_sample_rng_is_pure():
    assert stages.sample_rng(3, 1, 2, 4, 5).random() == stages.sample_rng(3, 1, 2, 4, 5).random()
    assert stages.sample_rng(3, 1, 2, 4, 5).random() != stages.sample_rng(3, 1, 2, 4, 6).random()


def test_collate_dicts_tuples_arrays_numbers_and_others():
    samples = [{"__key__": f"k{i}", "img": np.full((2, 2), i, np.uint8), "cls": i, "w": 0.5, "txt": "t"} for i in range(3)]
    batch = stages.default_collate(samples)
    assert batch["img"].shape == (3, 2, 2) and batch["img"].dtype == np.uint8
    assert batch["cls"].tolist() == [0, 1, 2] and batch["w"].dtype == np.float64
    assert batch["__key__"] == ["k0", "k1", "k2"] and batch["txt"] == ["t"] * 3
    tup = stages.default_collate([(np.zeros(3), 1), (np.ones(3), 2)])
    assert isinstance(tup, tuple) and tup[0].shape == (2, 3) and tup[1].tolist() == [1, 2]
    ragged = stages.default_collate([np.zeros(2), np.zeros(3)])
    assert isinstance(ragged, list) and len(ragged) == 2
    assert stages.default_collate([np.float32(1), np.float32(2)]).dtype == np.float32


def test_batching_partial_and_sizes():
    assert [len(b) for b in stages.batching(range(7), 3)] == [3, 3, 1]
    assert [len(b) for b in stages.batching(range(7), 3, partial=False)] == [3, 3]
    assert stages.batch_size({"__key__": ["a", "b"], "x": np.zeros((2, 5))}) == 2
    assert stages.batch_size((np.zeros((4, 1)), [1, 2, 3, 4])) == 4
    with pytest.raises(TypeError):
        stages.batch_size(3)


def test_unbatch_inverts_collate():
    samples = [{"a": np.arange(3) + i, "b": i, "s": str(i)} for i in range(5)]
    back = list(stages.unbatching(stages.batching(samples, 2)))
    assert len(back) == 5
    assert all(np.array_equal(x["a"], y["a"]) and x["b"] == y["b"] and x["s"] == y["s"] for x, y in zip(back, samples))
    tuples = list(stages.unbatching(stages.batching([(i, str(i)) for i in range(3)], 2)))
    assert tuples == [(0, "0"), (1, "1"), (2, "2")]


def test_rebatch_regroups():
    batches = [np.arange(5), np.arange(5, 7), np.arange(7, 16)]
    out = list(stages.rebatching(batches, 4))
    assert [len(b) for b in out] == [4, 4, 4, 4]
    assert np.concatenate(out).tolist() == list(range(16))


def test_missing_field_names_the_sample():
    with pytest.raises(KeyError, match="k7"):
        list(stages.tupling([{"__key__": "k7", "png": b""}], ["jpg"]))
