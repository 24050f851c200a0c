"""Consumption and ResumePlan: what a consumer records and what a restarted server skips (pure)."""

import json

import numpy as np
import pytest

from tensorcom.transport.connection import Connection
from tensorcom.transport.index_set import IndexSet
from tensorcom.transport.resume import Consumption, ResumePlan, load_state, merge_states
from tensorcom.wire import Portion


def test_records_batches_and_samples_per_epoch_and_worker():
    record = Consumption()
    w0, w1 = Portion("s", 0, 2), Portion("s", 1, 2)
    for _ in range(3):
        record.batch(w0, 0, 5)
    record.batch(w1, 0, 4)
    state = record.state_dict()
    assert state["streams"]["s"]["epoch"] == 0 and state["streams"]["s"]["workers"] == 2
    assert state["streams"]["s"]["shares"] == [
        {"epoch": 0, "worker": 0, "batches": 3, "samples": 15, "ended": False, "taken": [[0, 3]]},
        {"epoch": 0, "worker": 1, "batches": 1, "samples": 4, "ended": False, "taken": [[0, 1]]}]
    json.dumps(state)  # JSON-ready


def test_an_epoch_ended_by_every_worker_is_dropped_and_the_next_begins():
    record = Consumption()
    w0, w1 = Portion("s", 0, 2), Portion("s", 1, 2)
    record.batch(w0, 0, 5)
    record.marker(w0, 0)
    record.batch(w0, 1, 5)  # a fast worker's next epoch, delivered before w1 ended epoch 0
    assert ResumePlan.from_state(record.state_dict()).consumed == {(0, 0): IndexSet([[0, 1]]),
                                                                (1, 0): IndexSet([[0, 1]])}
    record.batch(w1, 0, 5)
    record.marker(w1, 0)
    plan = ResumePlan.from_state(record.state_dict())
    assert plan == ResumePlan("s", 2, 1, {(1, 0): 1}) and plan.skip(1, 1) == 0


def test_state_round_trip_and_file(tmp_path):
    record = Consumption()
    record.batch(Portion("s", 1, 3), 4, 8)
    record.passes = 4
    copy = Consumption()
    copy.load_state_dict(json.loads(json.dumps(record.state_dict())))
    assert copy.state_dict() == record.state_dict()
    path = tmp_path / "state.json"
    path.write_text(json.dumps(record.state_dict()))
    assert load_state(path) == record.state_dict() and load_state(str(path)) == record.state_dict()
    plan = ResumePlan.from_state(path)
    assert (plan.stream, plan.workers, plan.epoch, plan.skip(4, 1)) == ("s", 3, 4, 1)


def test_plan_from_an_empty_state_and_stream_choice():
    assert ResumePlan.from_state(Consumption().state_dict()) is None
    record = Consumption()
    record.batch(Portion("a", 0, 1), 0, 1)
    record.batch(Portion("b", 0, 1), 2, 1)
    with pytest.raises(ValueError, match="2 served streams"):
        ResumePlan.from_state(record.state_dict())
    assert ResumePlan.from_state(record.state_dict(), "b").epoch == 2
    with pytest.raises(ValueError, match="no stream 'c'"):
        ResumePlan.from_state(record.state_dict(), "c")


def test_batches_are_recorded_by_their_index_and_a_batch_without_one_follows_the_highest():
    record, portion = Consumption(), Portion("s", 0, 1)
    for index in (0, 1, 4, 2):
        record.batch(portion, 0, 2, index)
    record.batch(portion, 0, 2)  # no index: after the highest (4)
    share = record.state_dict()["streams"]["s"]["shares"][0]
    assert (share["taken"], share["batches"], share["samples"]) == ([[0, 3], [4, 6]], 5, 10)
    plan = ResumePlan.from_state(record.state_dict())
    assert list(plan.taken(0, 0).missing(8)) == [3, 6, 7] and plan.skip(0, 0) == 3


def test_a_version_1_state_loads_with_its_batches_taken_from_the_front():
    state = {"version": 1, "passes": 2, "streams": {"s": {"workers": 2, "epoch": 3, "shares": [
        {"epoch": 3, "worker": 1, "batches": 4, "samples": 16, "ended": False}]}}}
    plan = ResumePlan.from_state(state)
    assert (plan.portions, plan.epoch, plan.taken(3, 1).intervals, len(plan.taken(3, 0))) == (2, 3, [[0, 4]], 0)
    record = Consumption()
    record.load_state_dict(state)
    assert record.state_dict()["version"] == 2 and record.passes == 2


def test_merge_states_unites_the_ranks_records():
    ranks = [Consumption() for _ in range(3)]
    p0, p1 = Portion("s", 0, 2), Portion("s", 1, 2)
    for index in range(9):  # round-robin over the ranks, as a zsplit server hands batches out
        ranks[index % 3].batch(p0, 1, 4, index)
    ranks[1].batch(p1, 1, 3, 0)
    ranks[2].marker(p1, 1)
    ranks[0].passes, ranks[1].passes, ranks[2].passes = 1, 2, 1
    merged = merge_states([rank.state_dict() for rank in ranks])
    assert merged["passes"] == 1 and merged["streams"]["s"]["epoch"] == 1
    assert merged["streams"]["s"]["shares"] == [
        {"epoch": 1, "worker": 0, "batches": 9, "samples": 36, "ended": False, "taken": [[0, 9]]},
        {"epoch": 1, "worker": 1, "batches": 1, "samples": 3, "ended": True, "taken": [[0, 1]]}]
    ranks[0].marker(p0, 1)  # every portion of epoch 1 ended in the union: it is complete
    assert merge_states([rank.state_dict() for rank in ranks])["streams"]["s"] == {
        "workers": 2, "epoch": 2, "shares": []}


def test_merge_states_refuses_states_of_different_streams_shapes_and_none():
    a, b = Consumption(), Consumption()
    a.batch(Portion("s", 0, 2), 0, 1)
    b.batch(Portion("s", 0, 3), 0, 1)
    with pytest.raises(ValueError, match="2 and 3 portions"):
        merge_states([a.state_dict(), b.state_dict()])
    with pytest.raises(ValueError, match="at least one"):
        merge_states([])


@pytest.mark.parametrize("state, match", [
    ({"version": 9}, "version-1 or -2"),
    ({"version": 1, "streams": []}, "streams"),
    ({"version": 1, "streams": {"s": {"workers": 0}}}, "workers"),
    ({"version": 1, "streams": {"s": {"workers": 1, "shares": [{"epoch": -1}]}}}, "epoch"),
    ({"version": 1, "passes": True}, "passes"),
    ({"version": 2, "streams": {"s": {"workers": 1, "shares": [{"taken": [[2, 1]]}]}}}, "interval"),
    ({"version": 2, "streams": {"s": {"workers": 1, "shares": [{"taken": [[0, 2]], "batches": 3}]}}}, "batches"),
    ({"version": 2, "streams": {"s": {"workers": 1, "shares": [{"taken": 3}]}}}, "taken"),
    ({"version": 2, "streams": {"s": {"workers": 2, "shares": [{"worker": 2}]}}}, "worker 2"),
])
def test_malformed_states_name_what_is_wrong(state, match):
    with pytest.raises(ValueError, match=match):
        Consumption().load_state_dict(state)


def test_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        load_state(bad)
    with pytest.raises(TypeError, match="dict or the path"):
        load_state(3)


def test_a_restart_with_another_worker_count_starts_the_stream_over():
    record = Consumption()
    record.batch(Portion("s", 0, 2), 3, 1)
    record.batch(Portion("s", 0, 4), 3, 1)
    assert ResumePlan.from_state(record.state_dict()) == ResumePlan("s", 4, 3, {(3, 0): 1})


def test_connection_records_what_it_hands_over(tmp_path):
    """Sender connections tagged with portions (as tensorcom.serve's workers) -> the receiver's state."""
    with Connection("zpull+inproc://resume-a", timeout=5) as receiver, \
            Connection("zpush+inproc://resume-a", portion=("s", 1, 2), group="s", group_size=2) as w1, \
            Connection("zpush+inproc://resume-a", portion=("s", 0, 2), group="s", group_size=2) as w0:
        w1.epoch_number = w0.epoch_number = 5
        for i in range(3):
            w1.send({"x": np.zeros((4, 2), np.float32), "i": i})
        w0.send({"x": np.zeros((3, 2), np.float32), "i": 9})
        w1.end_epoch()
        batches = [receiver.recv() for _ in range(4)]
        assert len(batches) == 4
        state = receiver.state_dict()
        path = tmp_path / "state.json"
        receiver.save_state(path)
    assert json.loads(path.read_text()) == state
    assert state["streams"]["s"]["shares"] == [
        {"epoch": 5, "worker": 0, "batches": 1, "samples": 3, "ended": False, "taken": [[0, 1]]},
        {"epoch": 5, "worker": 1, "batches": 3, "samples": 12, "ended": False, "taken": [[0, 3]]}]
    with Connection("zpull+inproc://resume-b") as restarted:
        restarted.load_state_dict(state)
        assert restarted.state_dict() == state
