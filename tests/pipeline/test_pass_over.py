"""Passing over items (tensorcom.pipeline._node.skip, the catch-up worker's asked_batches): a map or
batch stage skips without computing, and what follows is the item an uninterrupted pass gives, with
the same random draws and the same state."""

from __future__ import annotations

import numpy as np
import pytest

from tensorcom.pipeline import Pipeline
from tensorcom.pipeline._node import skip
from tensorcom.pipeline.catch_up import asked_batches

CALLS: list[int] = []


def noted(sample: int, rng: np.random.Generator) -> tuple[int, int]:
    """The sample and a draw; each call noted in CALLS."""
    CALLS.append(sample)
    return sample, int(rng.integers(1 << 30))


def pipeline(shuffle: bool = False, workers: int = 0) -> Pipeline:
    made = Pipeline(range(23), seed=4)
    made = made.shuffle(5) if shuffle else made
    return made.map(noted, rng=True, workers=workers).batch(3)


def as_lists(batches) -> list:
    """Batches (collated fields: samples, draws) as plain lists, for ==."""
    return [[np.asarray(field).tolist() for field in batch] for batch in batches]


@pytest.mark.parametrize("shuffle, workers", [(False, 0), (True, 0), (True, 2)], ids=["inline", "shuffled", "helpers"])
def test_skipped_batches_are_not_computed_and_the_rest_is_the_uninterrupted_pass(shuffle, workers):
    whole = list(pipeline(shuffle))
    CALLS.clear()
    chain = iter(pipeline(shuffle, workers))
    assert skip(chain, 5) == 5
    assert CALLS == []  # the map's function ran for none of the 15 samples passed over
    assert as_lists(chain) == as_lists(whole[5:])


def test_the_state_after_passing_over_is_the_state_after_taking():
    taken, passed = pipeline(), pipeline()
    taking, passing = iter(taken), iter(passed)
    for _ in range(4):
        next(taking)
    skip(passing, 4)
    assert passed.state_dict() == taken.state_dict()


def test_passing_over_the_end_counts_what_there_was():
    chain = iter(pipeline())
    assert skip(chain, 100) == 8  # 7 whole batches of 3 and a last one of 2
    assert next(chain, None) is None


def test_asked_batches_are_those_of_an_uninterrupted_pass_in_order():
    whole = list(pipeline(shuffle=True))
    got = list(asked_batches(iter(pipeline(shuffle=True)), [6, 1, 2, 7, 30]))
    assert [index for index, _ in got] == [1, 2, 6, 7]  # sorted, nothing past the portion's end
    for index, batch in got:
        assert as_lists([batch]) == as_lists([whole[index]])


def test_a_resumed_portion_passes_over_the_taken_batches_without_computing_them():
    from tensorcom.pipeline.portion_sending import untaken
    from tensorcom.transport.index_set import IndexSet

    whole = list(pipeline())
    CALLS.clear()
    sent = list(untaken(iter(pipeline()), IndexSet([[0, 2], [4, 5]]), 0, 0))
    assert [index for index, _ in sent] == [2, 3, 5, 6, 7]
    assert as_lists(batch for _, batch in sent) == as_lists(whole[i] for i in (2, 3, 5, 6, 7))
    assert sorted(CALLS) == [6, 7, 8, 9, 10, 11, *range(15, 23)]  # the map ran for the sent batches only


def test_a_taken_set_beyond_the_portion_is_refused():
    from tensorcom.pipeline.portion_sending import untaken
    from tensorcom.transport.index_set import IndexSet

    with pytest.raises(ValueError, match="has only 8 batches"):
        list(untaken(iter(pipeline()), IndexSet([[6, 10]]), 0, 0))
    with pytest.raises(ValueError, match="has only 8 batches"):
        list(untaken(iter(pipeline()), IndexSet([[9, 10]]), 0, 0))
