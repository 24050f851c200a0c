"""tensorcom.batch: the one batch model (rows, cutting, joining, collating) that every path uses."""

import numpy as np
import pytest

from tensorcom import batch as batches
from tensorcom.batch import batch_size, cut, default_collate, join, rows
from tensorcom.pipeline import Pipeline
from tensorcom.transport.rebatch import Rebatcher


def image_label_batch(n=64):
    """What serve-imagenet-dir sends: [images uint8 (n, H, W, 3), labels int32 (n,)]."""
    return [np.zeros((n, 8, 8, 3), np.uint8), np.arange(n, dtype=np.int32)]


def test_list_batch_counts_rows_not_fields():
    assert batch_size(image_label_batch(64)) == 64
    assert batch_size(tuple(image_label_batch(5))) == 5


def test_dict_batch_counts_rows_and_consults_dunder_fields_last():
    assert batch_size({"__key__": ["a", "b", "c"], "x": np.zeros((2, 5))}) == 2
    assert batch_size({"__key__": ["a", "b", "c"], "n": 7}) == 3
    assert batch_size({"jpg": [b"a", b"b"], "cls": np.arange(2)}) == 2


def test_plain_values_are_skipped_then_count_one():
    assert batch_size(["name", np.float32(1.5), np.zeros((4, 2))]) == 4  # first field with rows decides
    assert batch_size([3, "x", b"y", np.array(2.0)]) == 1
    assert batch_size({"n": 3}) == 1


def test_bare_arrays_count_their_leading_dimension():
    assert batch_size(np.zeros((64, 224, 224, 3))) == 64
    assert batch_size(np.array(5)) == 1


def test_empty_and_mismatched_batches_are_counted_without_failing():
    assert batch_size([]) == 0 and batch_size({}) == 0 and batch_size(()) == 0
    assert batch_size([np.zeros((64, 3)), np.zeros(32)]) == 64  # the first field decides, unchecked


def test_non_batches_are_a_type_error_naming_the_type():
    with pytest.raises(TypeError, match="int"):
        batch_size(3)
    with pytest.raises(TypeError, match="str"):
        batch_size("abc")


def test_torch_tensors_count_rows():
    torch = pytest.importorskip("torch")
    assert batch_size([torch.zeros(16, 3, 8, 8), torch.zeros(16)]) == 16
    assert batch_size(torch.zeros(16, 2)) == 16


def test_every_counter_uses_the_one_implementation():
    from tensorcom import zcom
    from tensorcom.pipeline import portion_sending
    from tensorcom.transport.ends import intake, plain_sender
    from tensorcom.transport.sharing import _input

    for module in (zcom, portion_sending, intake, plain_sender, _input):
        assert module.batch_size is batches.batch_size, module.__name__


def test_collate_dicts_tuples_arrays_numbers_and_others():
    samples = [{"__key__": f"k{i}", "img": np.full((2, 2), i, np.uint8), "cls": i, "w": 0.5, "txt": "t"} for i in range(3)]
    batch = default_collate(samples)
    assert batch["img"].shape == (3, 2, 2) and batch["img"].dtype == np.uint8
    assert batch["cls"].tolist() == [0, 1, 2] and batch["w"].dtype == np.float64
    assert batch["__key__"] == ["k0", "k1", "k2"] and batch["txt"] == ["t"] * 3
    tup = default_collate([(np.zeros(3), 1), (np.ones(3), 2)])
    assert isinstance(tup, tuple) and tup[0].shape == (2, 3) and tup[1].tolist() == [1, 2]
    ragged = default_collate([np.zeros(2), np.zeros(3)])
    assert isinstance(ragged, list) and len(ragged) == 2
    assert default_collate([np.float32(1), np.float32(2)]).dtype == np.float32


def test_rows_of_dict_list_tuple_and_array_batches():
    images, labels = image_label_batch(3)
    assert [label for _, label in rows([images, labels])] == [0, 1, 2]
    assert list(rows((np.arange(2), ["a", "b"]))) == [(0, "a"), (1, "b")]
    assert list(rows({"id": np.arange(2), "__key__": ["a", "b"]})) == [{"id": 0, "__key__": "a"},
                                                                      {"id": 1, "__key__": "b"}]
    assert [r.tolist() for r in rows(np.arange(6).reshape(3, 2))] == [[0, 1], [2, 3], [4, 5]]
    assert list(rows([])) == [] and list(rows({})) == []


def test_rows_invert_collate():
    samples = [(np.full(2, i), str(i), i) for i in range(4)]
    back = list(rows(default_collate(samples)))
    assert [(a.tolist(), s, int(n)) for a, s, n in back] == [(a.tolist(), s, n) for a, s, n in samples]


def test_strict_rule_names_the_field_and_the_operation():
    with pytest.raises(ValueError, match="cannot unbatch field 'name': it has no rows"):
        list(rows({"x": np.zeros((4, 2)), "name": "one string for the whole batch"}))
    with pytest.raises(ValueError, match="cannot rebatch field 1: it has 3 where the batch has 4"):
        join([[np.zeros(4), np.zeros(3)]], "rebatch")
    with pytest.raises(ValueError, match="list of fields"):
        list(rows([{"a": 1}, {"a": 2}]))  # a list of samples is not a batch
    with pytest.raises(ValueError, match="no rows"):
        list(rows(np.array(3)))


def test_cut_and_join_keep_the_container_and_the_rows():
    whole = [np.arange(5), ("a", "b", "c", "d", "e")]
    pieces = [cut(whole, 0, 2), cut(whole, 2, 5)]
    assert isinstance(pieces[0], list) and pieces[0][1] == ("a", "b")
    joined = join(pieces)
    assert isinstance(joined, list) and joined[0].tolist() == [0, 1, 2, 3, 4] and joined[1] == whole[1]
    assert join([{"x": np.zeros((1, 2))}, {"x": np.ones((2, 2))}])["x"].shape == (3, 2)
    ragged = join([[np.zeros((2, 3))], [[np.zeros(4)]]])  # an array part and a ragged (list) part
    assert isinstance(ragged[0], list) and [r.shape for r in ragged[0]] == [(3,), (3,), (4,)]
    with pytest.raises(ValueError, match="fields"):
        join([{"x": np.zeros(2)}, {"y": np.zeros(2)}])


def two_list_batches():
    """Two [ids, names] batches of 4 rows each, as a Connection yields them."""
    return [[np.arange(4 * b, 4 * b + 4), [f"s{i}" for i in range(4 * b, 4 * b + 4)]] for b in range(2)]


def as_rows(batches_):
    return [(int(i), name) for batch in batches_ for i, name in rows(batch)]


def test_pipeline_rebatch_regroups_the_rows_of_list_batches():
    """Pipeline.rebatch used to take a list batch for a list of rows: it stacked whole fields."""
    out = list(Pipeline(two_list_batches()).rebatch(3))
    assert [batch_size(batch) for batch in out] == [3, 3, 2]
    assert as_rows(out) == [(i, f"s{i}") for i in range(8)]


def test_pipeline_unbatch_yields_samples_of_list_batches():
    """Pipeline.unbatch used to yield the fields of a list batch, not its samples."""
    assert [(int(i), name) for i, name in Pipeline(two_list_batches()).unbatch()] == [(i, f"s{i}") for i in range(8)]


def rebatched(given, size):
    """The batches a Rebatcher(size) makes of `given` (the last one flushed)."""
    rebatcher, out = Rebatcher(size), []
    for batch in given:
        rebatcher.push(batch)
        while (got := rebatcher.pop()[0]) is not None:
            out.append(got)
    return out + [rebatcher.flush()[0]]


@pytest.mark.parametrize("make", [list, tuple, lambda fields: dict(zip(("id", "name"), fields))])
def test_pipeline_and_the_rebatcher_agree_on_list_tuple_and_dict_batches(make):
    given = [make(fields) for fields in two_list_batches()]
    expected = [(i, f"s{i}") for i in range(8)]
    for out in (rebatched(given, 3), list(Pipeline(given).rebatch(3))):
        assert [batch_size(b) for b in out] == [3, 3, 2]
        samples = [tuple(r.values()) if isinstance(r, dict) else r for b in out for r in rows(b)]
        assert [(int(i), name) for i, name in samples] == expected
