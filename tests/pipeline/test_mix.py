"""Weighted mixtures: the pure core (tensorcom.pipeline.mix, no data, no processes) and the Mix node
over members of different kinds, saved and restored three times in a row."""

from __future__ import annotations

import collections
import itertools
import json

import pytest

from tensorcom import shards
from tensorcom.pipeline import IterableSource, Mix, PathSource, Pipeline, ShardSource
from tensorcom.pipeline.mix import MixCursor, MixPlan, member_counts, stop_length, window_counts

KEY = (5, 2, 1)  # (seed, epoch, worker)


def run(cursor, steps, lengths=None):
    """Drive `cursor` for up to `steps` samples with members of `lengths` (None: endless); returns the
    members that gave a sample, in order."""
    taken = []
    while len(taken) < steps:
        member = cursor.member()
        if member is None:
            break
        left = None if lengths is None else lengths[member] - (cursor.counts[member] - cursor.pass_start[member])
        if left == 0:
            cursor.ended(member)
            continue
        cursor.took(member)
        taken.append(member)
    return taken


# --- the pure core ------------------------------------------------------------------------------------


def test_window_counts_are_largest_remainder_and_fill_the_window():
    assert window_counts((0.7, 0.3), 1000) == [700, 300]
    assert window_counts((1, 1, 1), 10) == [4, 3, 3]
    assert window_counts((2, 1, 1), 7) == [3, 2, 2]  # quotas 3.5, 1.75, 1.75: the two .75 remainders win
    assert window_counts((1, 1), 3) == [2, 1]  # a tie goes to the lower index
    assert sum(window_counts((0.123, 4.5, 9.9, 1), 97)) == 97


def test_exact_policy_holds_the_proportions_in_every_window():
    cursor = MixCursor(MixPlan((0.7, 0.3), policy="exact", window=100), KEY)
    taken = run(cursor, 500)
    for start in range(0, 500, 100):
        assert collections.Counter(taken[start:start + 100]) == {0: 70, 1: 30}
    assert taken[:100] != taken[100:200]  # each window shuffled on its own


def test_random_choices_are_a_function_of_the_key_and_the_position():
    plan = MixPlan((3, 1), policy="random")
    whole = run(MixCursor(plan, KEY), 3000)
    for k in (0, 1, 1023, 1024, 2500):  # inside and at the edges of the generator's blocks
        cursor = MixCursor(plan, KEY)
        cursor.load_state_dict({**cursor.state_dict(), "position": k})
        assert run(cursor, 3000 - k) == whole[k:]
    assert run(MixCursor(plan, (5, 2, 0)), 3000) != whole  # another worker, other choices
    assert 0.72 < whole.count(0) / len(whole) < 0.78  # drawn with probability 3/4


def test_stop_ends_the_mixture_at_the_first_empty_member():
    cursor = MixCursor(MixPlan((1, 1), on_end="stop"), KEY)
    taken = run(cursor, 100, lengths=[5, 50])
    assert taken.count(0) == 5 and cursor.member() is None and cursor.stopped
    plan = MixPlan((1, 1), on_end="stop")
    assert len(taken) == stop_length(plan, KEY, [5, 50])


@pytest.mark.parametrize("policy", ["random", "exact"])
def test_stop_length_is_the_count_before_the_first_empty_member(policy):
    plan = MixPlan((0.6, 0.3, 0.1), policy=policy, window=20, on_end="stop")
    for lengths in ([600, 300, 100], [3000, 10, 5000], [0, 5, 5]):
        assert stop_length(plan, KEY, lengths) == len(run(MixCursor(plan, KEY), 10**5, lengths))


def test_resample_starts_the_next_pass_and_refuses_an_empty_one():
    cursor = MixCursor(MixPlan((1, 1), on_end="resample"), KEY)
    taken = run(cursor, 100, lengths=[3, 1000])
    assert len(taken) == 100 and cursor.passes[0] > 5 and cursor.counts[0] == taken.count(0)
    empty = MixCursor(MixPlan((1, 1), on_end="resample"), KEY, names=["web", "books"])
    with pytest.raises(ValueError, match="member 'books' has no samples in pass 0"):
        run(empty, 100, lengths=[3, 0])


@pytest.mark.parametrize("policy", ["random", "exact"])
def test_drop_renormalises_the_weights_of_the_others(policy):
    plan, lengths = MixPlan((0.5, 0.3, 0.2), policy=policy, window=10, on_end="drop"), [400, 1000, 40]
    cursor, taken = MixCursor(plan, KEY), []
    while cursor.active[2]:
        taken += run(cursor, 1, lengths)
    dropped = cursor.segment  # member 2 was found empty here
    assert taken.count(2) == 40 and 0 < len(taken) - dropped <= 1
    taken += run(cursor, 10**4, lengths)
    assert len(taken) == 1440 and cursor.member() is None  # every sample of every member, then the end
    after = taken[dropped:dropped + 100]
    assert 2 not in after
    if policy == "exact":  # fresh windows of 5:3 renormalised: 6 and 4 of every 10 (largest remainder)
        assert collections.Counter(after[:10]) == {0: 6, 1: 4} == collections.Counter(after[10:20])
    assert 0.5 < after.count(0) / len(after) < 0.75  # 5/8 = 0.625


def test_the_cursor_state_is_plain_and_restores_every_rule():
    plan = MixPlan((2, 1, 1), policy="exact", window=8, on_end="drop")
    lengths = [40, 7, 30]
    whole = run(MixCursor(plan, KEY), 10**3, lengths)
    cursor, taken = MixCursor(plan, KEY), []
    for stop in (5, 13, 31):  # before and after member 1 is dropped
        taken += run(cursor, stop - len(taken), lengths)
        state = json.loads(json.dumps(cursor.state_dict()))
        cursor = MixCursor(plan, KEY)
        cursor.load_state_dict(state)
    assert taken + run(cursor, 10**3, lengths) == whole


def test_bad_plans_are_value_errors_naming_the_value():
    with pytest.raises(ValueError, match="-1"):
        MixPlan((1, -1))
    with pytest.raises(ValueError, match="did you mean 'exact'"):
        MixPlan((1, 1), policy="exakt")
    with pytest.raises(ValueError, match="did you mean 'resample'"):
        MixPlan((1, 1), on_end="resampled")
    with pytest.raises(ValueError, match="window 2 is smaller than the 3 members"):
        MixPlan((1, 1, 1), policy="exact", window=2)
    with pytest.raises(ValueError, match="one weight per member"):
        Mix([[1], [2]], [1, 2, 3])


def test_member_counts_add_up_every_mixture_state_inside_a_state():
    one = {"mix": {"names": ["a", "b"], "cursor": {"counts": [3, 4]}}, "members": [None, None]}
    two = {"mix": {"names": ["a", "b"], "cursor": {"counts": [1, 0]}}, "members": [None, None]}
    assert member_counts({"workers": [{"chain": {"up": one}}, {"chain": two}]}) == {"a": 4, "b": 4}
    assert member_counts({"chain": None}) == {}


# --- the node over members of different kinds ---------------------------------------------------


def double(sample):
    return {**sample, "cls": int(sample["cls"]) * 2}


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """Members of three kinds: 4 tar shards of 6 samples, a folder of 9 files, a list of 15 numbers."""
    root = tmp_path_factory.mktemp("mix")
    (root / "files").mkdir()
    for i in range(9):
        (root / "files" / f"f{i}.txt").write_text(f"file {i}")
    with shards.ShardWriter(str(root / "m-%02d.tar"), maxcount=6) as writer:
        for sample in ({"__key__": f"t{i:02d}", "cls": i} for i in range(24)):
            writer.write(sample)
    return {"shards": Pipeline(ShardSource(f"{root}/m-{{00..03}}.tar", shuffle=True)).shuffle(5).map(double),
            "folder": PathSource(sorted(str(p) for p in (root / "files").iterdir()), shuffle=True),
            "numbers": IterableSource(list(range(100, 115)))}


def key(item):
    return item if isinstance(item, int) else item["__key__"].rsplit("/", 1)[-1]


def three_restores(make, stops):
    """Items of `make()`, saved and restored (through JSON, into a fresh pipeline) at each of `stops`."""
    p, taken = make(), []
    iterator = iter(p)
    for stop in stops:
        taken += [key(x) for x in itertools.islice(iterator, stop - len(taken))]
        state = json.loads(json.dumps(p.state_dict()))
        p = make()
        p.load_state_dict(state)
        iterator = iter(p)
    return taken + [key(x) for x in iterator]


@pytest.mark.parametrize("policy,on_end", [("random", "stop"), ("exact", "drop"), ("random", "resample")])
def test_three_save_restore_cycles_give_the_uninterrupted_sequence(kinds, policy, on_end):
    def make():
        p = Pipeline.mix(kinds, {"shards": 5, "folder": 2, "numbers": 3}, seed=4, policy=policy, window=10,
                         on_end=on_end)
        return p.take(70) if on_end == "resample" else p

    whole = [key(x) for x in make()]
    assert len(whole) > 20
    assert three_restores(make, (1, 9, 17)) == whole
    assert three_restores(make, (4, 5, len(whole) - 2)) == whole
    if on_end == "drop":
        assert len(whole) == 24 + 9 + 15 and len(set(whole)) == 48
    if on_end == "resample":  # members restarted at their next pass: the folder's files come round again
        assert max(collections.Counter(k for k in whole if str(k).startswith("f")).values()) > 1


def test_len_is_exact_for_stop_and_drop_and_unknown_for_resample(kinds):
    members = [kinds["folder"], kinds["numbers"], Pipeline(range(200, 230), seed=3).shuffle(4)]
    for epoch in (0, 3):
        for policy, on_end in (("random", "stop"), ("exact", "stop"), ("random", "drop")):
            p = Pipeline.mix(members, [5, 2, 3], seed=1, policy=policy, window=10, on_end=on_end).set_epoch(epoch)
            assert len(p) == len(list(p)) and all(len(p.shard(i, 2)) == len(list(p.shard(i, 2))) for i in (0, 1))
    with pytest.raises(TypeError, match="length is unknown"):
        len(Pipeline.mix(members, [5, 2, 3], on_end="resample"))
    with pytest.raises(TypeError, match="length is unknown"):  # tar shards have no len
        len(Pipeline.mix(kinds, [5, 2, 3], on_end="drop"))


def test_each_member_is_split_like_the_mixture(kinds):
    """Two shards of a dropping mixture: disjoint, together every sample of every member once."""
    p = Pipeline.mix(kinds, [1, 1, 1], seed=2, on_end="drop")
    halves = [[key(x) for x in p.shard(i, 2)] for i in range(2)]
    assert not set(halves[0]) & set(halves[1])
    assert sorted(map(str, halves[0] + halves[1])) == sorted(str(key(x)) for x in p)


def test_counts_of_the_node_and_of_the_state(kinds):
    node = Mix(kinds, [5, 2, 3], on_end="drop").open(seed=0, epoch=0, worker=0, num_workers=1)
    taken = [key(x) for x in itertools.islice(node, 20)]
    counts = node.counts()
    assert sum(counts.values()) == 20 and counts["numbers"] == sum(isinstance(k, int) for k in taken)
    assert member_counts({"chain": node.state_dict()}) == counts


def test_members_of_one_size_are_not_shuffled_alike():
    same = [IterableSource(list(range(i * 100, i * 100 + 20)), shuffle=True) for i in range(2)]
    mixed = list(Pipeline.mix(same, [1, 1], seed=8, policy="exact", window=2, on_end="drop"))
    orders = [[x % 100 for x in mixed if x // 100 == i] for i in range(2)]
    assert sorted(orders[0]) == sorted(orders[1]) == list(range(20)) and orders[0] != orders[1]


def test_resampling_a_member_without_samples_is_an_error_naming_it():
    p = Pipeline.mix({"some": range(3), "none": []}, on_end="resample")
    with pytest.raises(ValueError, match="member 'none' has no samples in pass 0"):
        list(p.take(50))


def test_a_hugging_face_dataset_member_is_taken_as_pipeline_takes_it():
    datasets = pytest.importorskip("datasets")
    table = datasets.Dataset.from_dict({"x": list(range(30))})
    mix = Mix({"hf": table, "numbers": range(100, 110)}, [3, 1], policy="exact", window=4, on_end="drop")
    assert type(mix.members[0]) is type(Pipeline(table).source) and type(mix.members[1]) is IterableSource
    taken = [x if isinstance(x, int) else x["x"] for x in Pipeline(mix, seed=2)]
    assert sorted(taken) == [*range(30), *range(100, 110)]
