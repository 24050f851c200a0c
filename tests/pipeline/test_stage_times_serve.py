"""Where the time goes in tensorcom.serve: stage records from real serving processes to real sockets."""

import threading
import types

import numpy as np
import pytest
from test_serving import in_thread

from tensorcom.pipeline import Pipeline
from tensorcom.pipeline._supervisor import Supervisor, _rate_line
from tensorcom.transport.connection import Connection

pytestmark = [pytest.mark.net, pytest.mark.procs]


def to_sample(i):
    return {"i": np.int32(i), "x": np.full(4, i, np.int32)}


def busy_work(sample):
    """A fixed amount of computation (no sleep): the slow stage."""
    total = 0
    for k in range(200_000):
        total += k
    return {**sample, "t": np.int64(total)}


def numbered(i):
    return {"i": np.int64(i)}


def megabyte(i):
    return {"i": np.int32(i), "x": np.zeros(1 << 20, np.uint8)}


def test_the_slow_map_is_the_top_stage(free_port):
    port = free_port()
    pipeline = Pipeline(range(12)).map(to_sample).map(busy_work).batch(4)
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        thread, result = in_thread(pipeline, f"zpush://127.0.0.1:{port}", report=None)
        assert sorted(int(i) for b in conn for i in b["i"]) == list(range(12))
        thread.join(timeout=30)
    stats = result["stats"]
    stages = stats["stages"]
    assert list(stages) == ["read", "to_sample", "busy_work", "batch", "send"]
    assert sum(s["share"] for s in stages.values()) == pytest.approx(1.0)
    assert max(stages, key=lambda name: stages[name]["share"]) == "busy_work"
    assert stats["busy_s"] > stats["idle_s"] and stats["verdict"] != "server waiting on consumers: it keeps up"
    assert "; busy_work " in _rate_line(stats)


def test_a_consumer_that_does_not_read_leaves_the_server_waiting(free_port):
    """The consumer reads nothing until the reports show the server stalled (its batch count the
    same in several reports in a row), so the server's time goes to waiting in send."""
    port = free_port()
    reports, stalled = [], threading.Event()

    def on_report(stats):
        reports.append(stats["batches"])
        if len(reports) >= 6 and reports[-1] > 0 and len(set(reports[-6:])) == 1:
            stalled.set()

    pipeline = Pipeline(range(12)).map(megabyte).batch(1)
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30, rcvhwm=1) as conn:
        thread, result = in_thread(pipeline, f"zpush://127.0.0.1:{port}", report=0.05, on_report=on_report,
                                 connection_options={"sndhwm": 1})
        assert stalled.wait(timeout=30)
        assert len(list(conn)) == 12
        thread.join(timeout=30)
    stats = result["stats"]
    assert stats["idle_s"] > stats["busy_s"] and stats["stages"]["send"]["share"] > 0.5
    assert stats["verdict"] == "server waiting on consumers: it keeps up"


def test_a_mixture_reports_its_members_counts(free_port):
    port = free_port()
    pipeline = Pipeline.mix({"small": range(0, 30), "large": range(1000, 1030)}, [0.5, 0.5], seed=3).map(numbered)
    pipeline = pipeline.batch(4)
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        thread, result = in_thread(pipeline, f"zpush://127.0.0.1:{port}", workers=2, report=None)
        got = [int(x) for b in conn for x in b["i"]]
        thread.join(timeout=30)
    stats = result["stats"]
    assert stats["members"] == {"small": sum(x < 1000 for x in got), "large": sum(x >= 1000 for x in got)}
    assert sum(stats["members"].values()) == len(got) and "; mix: small " in _rate_line(stats)


def test_with_timing_off_the_report_has_no_stages(free_port, monkeypatch):
    """$TENSORCOM_TIMING=0 (tensorcom.settings.timing) reaches the serving processes: their counts
    carry no stage record, so the stats and the rate line have no stages and, without a sharing
    server's consumers, no verdict."""
    monkeypatch.setenv("TENSORCOM_TIMING", "0")
    port = free_port()
    pipeline = Pipeline(range(12)).map(to_sample).batch(4)
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        thread, result = in_thread(pipeline, f"zpush://127.0.0.1:{port}", report=None)
        assert sorted(int(i) for b in conn for i in b["i"]) == list(range(12))
        thread.join(timeout=30)
    stats = result["stats"]
    assert stats["samples"] == 12 and not {"stages", "idle_s", "busy_s", "verdict"} & set(stats)
    assert _rate_line(stats).endswith("1 workers)")


def test_with_timing_off_the_verdict_rests_on_the_consumers_data_wait():
    """No stage record (timing=False), a sharing server's consumer waiting half its time: the verdict
    still says so; an unknown wait gives no verdict."""
    hub = types.SimpleNamespace(server=types.SimpleNamespace(status=[{"data_wait": 0.5}, {"data_wait": None}]))
    supervisor = Supervisor(None, None, hub)
    assert supervisor.where_time_goes() == {"verdict": "consumers waiting on data (50%): add workers"}
    hub.server.status = [{"data_wait": None}]
    assert supervisor.where_time_goes() == {}


def test_workers_auto_times_its_stages_even_with_timing_off(free_port):
    """The autoscaler reads the processes' idle and busy shares from the stage times: timing=False
    does not turn them off under workers="auto"."""
    port = free_port()
    pipeline = Pipeline(range(12)).map(to_sample).batch(4)
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        thread, result = in_thread(pipeline, f"zpush://127.0.0.1:{port}", workers="auto", max_workers=1,
                                   timing=False, report=None)
        assert sorted(int(i) for b in conn for i in b["i"]) == list(range(12))
        thread.join(timeout=30)
    assert list(result["stats"]["stages"]) == ["read", "to_sample", "batch", "send"]
