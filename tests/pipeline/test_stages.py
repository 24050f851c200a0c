"""Stages are nodes: each checked on its own here (save/restore of every one: test_conformance.py)."""

import numpy as np
import pytest

from tensorcom.errors import SampleError
from tensorcom.pipeline import stages
from tensorcom.pipeline._node import Indexed
from tensorcom.pipeline._shuffle import Shuffled


def source(items):
    items = list(items)
    return Indexed(items, range(len(items)))


def double(x):
    return 2 * x


def test_stages_are_lazy_and_exact():
    consumed = []

    class Spy(Indexed):
        def __next__(self):
            item = super().__next__()
            consumed.append(item)
            return item

    node = stages.Mapped(Spy([1, 2], range(2)), double)
    assert consumed == [] and list(node) == [2, 4] and consumed == [1, 2]
    assert list(stages.Filtered(source(range(5)), lambda x: x % 2)) == [1, 3]
    assert list(stages.Mapped(source([{"__key__": "k", "a": 1, "b": 2}]), stages.FieldSelector(["a"]))) == [
        {"a": 1, "__key__": "k"}]
    assert list(stages.Mapped(source([{"jpg": b"x", "cls": 3}]), stages.FieldTuple(["png;jpg", "cls"]))) == [(b"x", 3)]


def test_mapping_with_rngs_and_key_note():
    out = list(stages.Mapped(source([1, 2]), lambda x, rng: x + rng.integers(10), (1, 2, 3, 4)))
    assert out == [1 + stages.sample_rng(1, 2, 3, 4, 0).integers(10), 2 + stages.sample_rng(1, 2, 3, 4, 1).integers(10)]
    with pytest.raises(ZeroDivisionError) as info:
        list(stages.Mapped(source([{"__key__": "bad", "x": 0}]), lambda s: 1 / s["x"]))
    assert info.value.tensorcom_key == "bad"
    assert any("bad" in note for note in info.value.__notes__)


def test_shuffle_is_a_permutation_and_seeded():
    a = list(Shuffled(source(range(100)), 10, (1, 0, 0, 0)))
    b = list(Shuffled(source(range(100)), 10, (1, 0, 0, 0)))
    c = list(Shuffled(source(range(100)), 10, (1, 1, 0, 0)))
    assert sorted(a) == list(range(100)) and a == b and a != c and a != list(range(100))
    assert sorted(Shuffled(source(range(3)), 10, (1, 0, 0, 0))) == [0, 1, 2]  # shorter than the buffer


def test_sample_rng_is_pure():
    assert stages.sample_rng(3, 1, 2, 4, 5).random() == stages.sample_rng(3, 1, 2, 4, 5).random()
    assert stages.sample_rng(3, 1, 2, 4, 5).random() != stages.sample_rng(3, 1, 2, 4, 6).random()


def test_batching_partial():
    assert [len(b) for b in stages.Batched(source(range(7)), 3)] == [3, 3, 1]
    assert [len(b) for b in stages.Batched(source(range(7)), 3, partial=False)] == [3, 3]


def test_unbatch_inverts_collate():
    samples = [{"a": np.arange(3) + i, "b": i, "s": str(i)} for i in range(5)]
    back = list(stages.Unbatched(stages.Batched(source(samples), 2)))
    assert len(back) == 5
    assert all(np.array_equal(x["a"], y["a"]) and x["b"] == y["b"] and x["s"] == y["s"] for x, y in zip(back, samples))
    tuples = list(stages.Unbatched(stages.Batched(source([(i, str(i)) for i in range(3)]), 2)))
    assert tuples == [(0, "0"), (1, "1"), (2, "2")]


def test_rebatch_regroups():
    batches = [np.arange(5), np.arange(5, 7), np.arange(7, 16)]
    out = list(stages.Batched(stages.Unbatched(source(batches)), 4))
    assert [len(b) for b in out] == [4, 4, 4, 4]
    assert np.concatenate(out).tolist() == list(range(16))


def test_repeat_builds_one_chain_per_pass_and_stops_on_an_empty_pass():
    passes = []

    def build(epoch):
        passes.append(epoch)
        return source([epoch] * 2)

    assert list(stages.Repeated(build, 3, 10)) == [10, 10, 11, 11, 12, 12] and passes == [10, 11, 12]
    assert list(stages.Repeated(lambda epoch: source([]), None, 0)) == []


def test_missing_field_names_the_sample():
    with pytest.raises(SampleError, match="k7"):
        list(stages.Mapped(source([{"__key__": "k7", "png": b""}]), stages.FieldTuple(["jpg"])))
