"""tensorcom.pipeline.stage_times: stage seconds on a fake clock, merging, shares and the verdict."""

import functools

import pytest

from tensorcom.pipeline import Pipeline
from tensorcom.pipeline._node import Node, skip
from tensorcom.pipeline._supervisor import _rate_line
from tensorcom.pipeline.stages import Mapped
from tensorcom.pipeline.stage_times import StageClock, merge, stage_names, summary, timed, top_stage, verdict


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Ticking(Node):
    """A stage that takes `pulls` upstream items per item and spends `cost` fake seconds of its own."""

    def __init__(self, up, clock, cost, pulls=1):
        self.up, self.clock, self.cost, self.pulls = up, clock, cost, pulls

    def __next__(self):
        items = [next(self.up) for _ in range(self.pulls)]
        self.clock.now += self.cost
        return items


class Counter(Node):
    def __init__(self, clock, cost):
        self.clock, self.cost, self.i = clock, cost, 0

    def __next__(self):
        self.clock.now += self.cost
        self.i += 1
        return self.i


def test_nested_time_counts_once_and_shares_add_up_to_one():
    fake = FakeClock()
    clock = StageClock(fake)
    node = clock.timed(Counter(fake, 1.0), "read")
    node = clock.timed(Ticking(node, fake, 2.0), "decode")
    node = clock.timed(Ticking(node, fake, 0.5, pulls=3), "batch")
    for _ in range(2):
        next(node)
    record = clock.record()
    assert record == {"read": [6.0, 6], "decode": [12.0, 6], "batch": [1.0, 2]}
    stages = summary(record, samples=6)
    assert sum(s["share"] for s in stages.values()) == pytest.approx(1.0)
    assert stages["decode"]["share"] == pytest.approx(12 / 19) and stages["read"]["per_sample_ms"] == 1000.0
    assert top_stage(stages) == "decode 63%"


def test_timed_nodes_pass_over_without_computing():
    fake, called = FakeClock(), []
    clock = StageClock(fake)
    mapped = Mapped(clock.timed(Counter(fake, 1.0), "read"), lambda i: called.append(i) or i)
    node = clock.timed(mapped, "f")
    assert skip(node, 3) == 3 and next(node) == 4 and called == [4]
    assert clock.record() == {"read": [1.0, 1], "f": [0.0, 1]}  # what is passed over is not timed


def test_merge_sums_processes_in_stage_order():
    records = [{"read": [1.0, 2], "send": [3.0, 2]}, None, {"read": [0.5, 1], "resize": [2.0, 1]}]
    assert merge(records) == {"read": [1.5, 3], "send": [3.0, 2], "resize": [2.0, 1]}
    assert list(merge(records)) == ["read", "send", "resize"]


def test_top_stage_leaves_send_out():
    stages = summary({"read": [1.0, 1], "send": [9.0, 1]}, 1)
    assert top_stage(stages) == "read 10%" and top_stage({}) == ""


def test_verdict_cases():
    assert verdict([0.05, 0.38], idle_s=0.0, busy_s=5.0) == "consumers waiting on data (38%): add workers"
    assert verdict([0.01, None], idle_s=8.0, busy_s=2.0) == "server waiting on consumers: it keeps up"
    assert verdict([], idle_s=8.0, busy_s=2.0) == "server waiting on consumers: it keeps up"
    assert verdict([0.05], idle_s=0.1, busy_s=9.9) == "balanced"
    assert verdict([None], idle_s=0.0, busy_s=0.0) == "balanced"


def test_stage_names_from_steps():
    p = Pipeline(range(4)).map(abs).filter(bool).map(functools.partial(abs)).map(FakeClock()).batch(2)
    assert stage_names("read", p.steps) == ["read", "abs", "filter", "abs#2", "FakeClock", "batch"]


def square(x):
    return x * x


def test_timed_pipeline_names_each_stage_and_keeps_its_position():
    fake = FakeClock()

    def costly(x):
        fake.now += 1.0
        return x * x

    clock = StageClock(fake)
    p = Pipeline(range(6)).map(costly).batch(2)
    t = timed(p, clock)
    it = iter(t)
    first = next(it)
    state = t.state_dict()
    rest = list(it)
    assert [b.tolist() for b in [first, *rest]] == [b.tolist() for b in p]
    assert list(clock.record()) == ["read", "costly", "batch"]
    assert clock.record()["costly"] == [6.0, 6] and top_stage(summary(clock.record(), 6)) == "costly 100%"
    t2 = timed(p, StageClock(fake))
    t2.load_state_dict(state)
    assert [b.tolist() for b in t2] == [b.tolist() for b in rest]


def test_a_parallel_stage_is_timed_whole_and_its_workers_get_no_clock():
    clock = StageClock()
    p = timed(Pipeline(range(8)).map(square).batch(2).parallel(2, processes=True), clock)
    try:
        got = sorted(int(x) for b in p for x in b)
    finally:
        p.close()
    assert got == sorted(x * x for x in range(8)) and list(clock.record()) == ["parallel"]


def test_rate_line_ends_with_verdict_and_top_stage():
    stats = {"batches_per_s": 1.0, "samples_per_s": 2.0, "batches": 3, "samples": 6, "workers": 1}
    assert _rate_line(stats).endswith("1 workers)")
    stages = summary({"read": [1.0, 6], "decode": [3.0, 6], "send": [6.0, 3]}, 6)
    line = _rate_line({**stats, "stages": stages, "verdict": "balanced"})
    assert line.endswith("workers); balanced; decode 30%")


def test_progress_counts_mixture_members_of_running_and_finished_epochs():
    from tensorcom.pipeline.portion_sending import Lane, _Progress

    mixed = Pipeline.mix({"a": range(0, 10), "b": range(100, 110)}, seed=1)
    lane = Lane(0, timed(mixed, StageClock()), conn=None)
    progress = _Progress(StageClock(), [lane])
    items = iter(lane.source)
    first = [next(items) for _ in range(5)]
    running = progress.report([lane])[3]
    assert running == {"a": sum(x < 100 for x in first), "b": sum(x >= 100 for x in first)}
    rest = list(items)
    progress.finished(lane)
    assert progress.report([])[3] == {"a": sum(x < 100 for x in first + rest), "b": sum(x >= 100 for x in first + rest)}
    assert len(_Progress(StageClock(), [Lane(0, Pipeline(range(3)), None)]).report([])) == 3


def test_the_supervisor_weighs_the_sharing_servers_consumers_data_wait():
    from types import SimpleNamespace

    from tensorcom.pipeline._supervisor import Supervisor

    server = SimpleNamespace(status=[{"name": "a", "data_wait": 0.05}, {"name": "b", "data_wait": 0.38}])
    supervisor = Supervisor(None, None, hub=SimpleNamespace(server=server))
    supervisor.handle(("item", 0, (2, 8, {"read": [1.0, 8], "decode": [3.0, 8], "send": [0.5, 2]})))
    supervisor.handle(("item", 1, (1, 4, {"read": [1.0, 4], "decode": [1.0, 4], "send": [0.5, 1]})))
    where = supervisor.where_time_goes()
    assert where["verdict"] == "consumers waiting on data (38%): add workers"
    assert where["idle_s"] == 1.0 and where["busy_s"] == 6.0
    assert where["stages"]["decode"]["per_sample_ms"] == pytest.approx(1000 * 4 / 12)
