"""The autoscaler's pure core with a fake clock and a model server; the /proc/stat parser; the
epoch-boundary scaling that serve's processes and tensorcom.ray's actors share."""

from types import SimpleNamespace

import pytest

from tensorcom.pipeline.autoscale import (Autoscaler, Elastic, EpochScaling, MachineIdle, Tuner, data_wait,
                                          idle_cores, parse_stat)


def model(workers, demand, cores=64):
    """(data_wait, idle_share) of a server whose workers each make one unit of rate per second,
    for consumers that would take `demand` units: who waits is whoever is faster."""
    supply = min(workers, cores)
    data_wait = max(0.0, 1.0 - supply / demand)
    idle_share = max(0.0, 1.0 - demand / supply) if supply else 0.0
    return data_wait, idle_share


def run(scaler, workers, demand, seconds=120, idle=None, cores=64):
    """Observe once a second for `seconds`, acting on every step; the worker counts over time."""
    counts = []
    for now in range(seconds):
        wait, share = model(workers, demand(now) if callable(demand) else demand, cores)
        workers += scaler.observe(float(now), wait, share, workers, idle)
        counts.append(workers)
    return counts


def test_rises_to_the_bottleneck_and_settles():
    scaler = Autoscaler(minimum=1, maximum=16, cores=16, window=3, cooldown=2)
    counts = run(scaler, scaler.start(), demand=4.5)
    assert counts[-1] == 5  # 4 workers leave the consumers waiting 11%: a fifth
    assert counts[-60:] == [5] * 60  # and no oscillation on a steady input


@pytest.mark.parametrize("demand", [2.1, 2.3, 2.5, 2.9, 3.3, 6.7])
def test_no_oscillation_on_a_steady_input(demand):
    scaler = Autoscaler(minimum=1, maximum=16, cores=16, window=3, cooldown=2)
    counts = run(scaler, 1, demand=demand, seconds=200)
    assert len(set(counts[-100:])) == 1, counts[-100:]
    assert model(counts[-1], demand)[0] <= scaler.threshold  # settled where consumers barely wait


def test_stops_at_cores_and_maximum():
    assert run(Autoscaler(minimum=1, maximum=16, cores=3, window=2, cooldown=1), 1, demand=10)[-1] == 3
    assert run(Autoscaler(minimum=1, maximum=2, cores=8, window=2, cooldown=1), 1, demand=10)[-1] == 2


def test_needs_an_idle_core_of_the_machine():
    busy = Autoscaler(minimum=1, maximum=8, cores=8, window=2, cooldown=1)
    assert run(busy, 2, demand=10, idle=0.2)[-1] == 2
    free = Autoscaler(minimum=1, maximum=8, cores=8, window=2, cooldown=1)
    assert run(free, 2, demand=10, idle=3.0)[-1] == 8


def test_falls_when_consumers_are_slow():
    scaler = Autoscaler(minimum=1, maximum=16, cores=16, window=3, cooldown=2)
    counts = run(scaler, 1, demand=lambda now: 6.5 if now < 60 else 1.5, seconds=160)
    assert counts[59] == 6  # 6 of 6.5 leave the consumers waiting 8%, under the threshold
    assert counts[-1] == 2 and counts[-40:] == [2] * 40
    assert min(counts[60:]) == 2  # it never dropped below what the slow consumers need


def test_waits_a_whole_window_above_the_threshold():
    scaler = Autoscaler(minimum=1, maximum=8, cores=8, threshold=0.1, window=3, cooldown=0)
    waits = [0.5, 0.5, 0.05, 0.5, 0.5, 0.5, 0.5]  # one good second restarts the window
    steps = [scaler.observe(float(t), w, 0.0, 2) for t, w in enumerate(waits)]
    assert steps == [0, 0, 0, 0, 0, 0, 1]


def test_keeps_within_minimum_and_rejects_bad_bounds():
    scaler = Autoscaler(minimum=2, maximum=4, cores=8)
    assert scaler.start() == 2
    assert scaler.observe(0.0, 0.0, 0.9, 1) == 1
    assert scaler.observe(1.0, 0.0, 0.9, 5) == -1
    with pytest.raises(ValueError, match="minimum"):
        Autoscaler(minimum=5, maximum=2)
    with pytest.raises(ValueError, match="threshold"):
        Autoscaler(threshold=1.5)


def test_proc_stat_parser_and_idle_cores():
    before = parse_stat("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n")
    after = parse_stat("cpu  200 0 100 1000 50 0 0 0 0 0\n")
    assert before == (850.0, 1000.0) and after == (1050.0, 1350.0)
    assert idle_cores(before, after, 4) == pytest.approx(4 * 200 / 350)
    assert idle_cores(after, after, 4) is None
    with pytest.raises(ValueError):
        parse_stat("intr 1 2 3")


def test_machine_idle_reads_deltas_and_falls_back_to_unknown():
    lines = iter(["cpu  10 0 0 90 0 0 0 0\n", "cpu  20 0 0 170 0 0 0 0\n"])
    idle = MachineIdle(cores=2, read=lambda path: next(lines))
    assert idle.sample() is None  # first reading: nothing to compare with
    assert idle.sample() == pytest.approx(2 * 80 / 90)
    assert MachineIdle(path="/nonexistent/stat").sample() is None
    real = MachineIdle()
    real.sample()
    value = real.sample()
    assert value is None or 0.0 <= value <= real.cores


class FakePool:
    def __init__(self, size):
        self.size = size

    def resize(self, size):
        self.size = size


def test_tuner_observes_once_an_interval_and_resizes_the_pool():
    clock = {"now": 0.0, "sent": 0.0}
    said = []
    tuner = Tuner(Autoscaler(minimum=1, maximum=4, cores=4, window=2, cooldown=0), interval=1.0,
                  sent=lambda: clock["sent"], machine=MachineIdle(read=lambda path: ""),
                  now=lambda: clock["now"], say=said.append)
    pool, waited = FakePool(1), 0.0
    for tick in range(40):  # every 0.25 s a result, after waiting 0.2 s for it: data wait 80%
        clock["now"] = tick * 0.25
        waited += 0.2
        tuner(pool, waited)
    assert pool.size == 4 and said[-1] == "map workers 4 (auto)"
    for tick in range(40, 80):  # now the loop waits on sends (70%), not on results
        clock["now"] = tick * 0.25
        clock["sent"] += 0.175
        tuner(pool, waited)
    assert pool.size == 1 and said[-1] == "map workers 1 (auto)"


class Steps:
    """A scaler that answers the steps it is given, one an observation, and records what it hears."""

    def __init__(self, *steps):
        self.steps, self.heard = list(steps), []

    def observe(self, now, data_wait, idle_share, workers, idle_cores):
        self.heard.append((now, workers))
        return self.steps.pop(0)

    def decided(self, target):
        self.heard.append(("decided", target))


def test_epoch_scaling_clamps_waits_for_the_boundary_and_asks_before_deciding():
    now = [0.0]
    scaler = Steps(+3, -1, -1, -1)
    scaling = EpochScaling(scaler, minimum=2, ceiling=4, clock=lambda: now[0])
    assert scaling.target == 2 and scaling.due(2) and not scaling.due(2)  # the first at once, then every second
    assert scaling.decide(0.5, 0.0, 2, None, ask=lambda: scaler.heard.append("asked"))
    assert scaling.target == 4 and scaler.heard == [(0.0, 2), "asked", ("decided", 4)]  # +3 clamped to the ceiling
    now[0] = 5.0
    assert not scaling.due(2) and scaling.due(4)  # nothing while 2 still run: the change waits for the boundary
    assert scaling.decide(0.0, 0.9, 4, None) and scaling.target == 3
    assert scaling.decide(0.0, 0.9, 3, None) and scaling.target == 2
    assert not scaling.decide(0.0, 0.9, 2, None) and scaling.target == 2  # 2 - 1 is below the minimum
    later = EpochScaling(scaler, 3, 4, clock=lambda: now[0], at_once=False)
    assert later.target == 3 and not later.due(3)
    now[0] = 6.0
    assert later.due(3)


def test_data_wait_is_the_largest_a_sharing_server_knows():
    hub = SimpleNamespace(server=SimpleNamespace(status=[{"data_wait": 0.25}, {"data_wait": {"share": 0.5}}, {}]))
    assert data_wait(hub, 0.9) == 0.5
    assert data_wait(SimpleNamespace(server=SimpleNamespace(status=[{}])), 0.9) == 0.9
    assert data_wait(None, 0.0) == 0.0


def test_elastic_spec():
    assert Elastic.of("auto") == Elastic() and Elastic.of(3) is None
    assert Elastic.of(Elastic(2, 5)).scaler().minimum == 2
    with pytest.raises(ValueError, match="'auto'"):
        Elastic.of("fast")
