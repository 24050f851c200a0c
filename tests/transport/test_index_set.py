"""IndexSet: the batch indices a consumer took of one portion, as sorted disjoint intervals (pure)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorcom.transport.index_set import IndexSet


def test_intervals_are_united_sorted_and_queried():
    taken = IndexSet([[6, 7], [0, 2], [1, 4], [4, 4]])
    assert taken.intervals == [[0, 4], [6, 7]] and len(taken) == 5 and taken.high == 7
    assert 3 in taken and 4 not in taken and 6 in taken and "3" not in taken
    assert list(taken) == [0, 1, 2, 3, 6] and list(taken.missing(9)) == [4, 5, 7, 8]
    assert list(taken.missing(2)) == [] and IndexSet().high == 0
    assert (taken | IndexSet([[4, 6]])).intervals == [[0, 7]]


@given(st.lists(st.integers(0, 40), max_size=30))
def test_adding_indices_one_by_one_gives_the_set_of_them(indices):
    taken = IndexSet()
    for index in indices:
        taken.add(index)
    assert list(taken) == sorted(set(indices)) == [i for i in range(41) if i in taken]
    assert list(taken.missing(41)) == sorted(set(range(41)) - set(indices))
    assert IndexSet(taken.intervals) == taken and all(a[1] < b[0] for a, b in zip(taken.intervals, taken.intervals[1:]))


@pytest.mark.parametrize("interval", [[2, 1], [-1, 2], [0.0, 1], [0], "ab", [True, 2]])
def test_a_bad_interval_is_refused_by_name(interval):
    with pytest.raises(ValueError, match="interval"):
        IndexSet([interval])
    with pytest.raises(ValueError, match="interval"):
        IndexSet().add(-1)
