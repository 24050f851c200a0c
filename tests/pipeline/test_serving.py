"""tensorcom.serve: worker processes sending disjoint portions to real sockets on 127.0.0.1."""

import json
import os
import signal
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from served import add_rss, big_sample, die_on_13, fail_on_13, make_pipeline, slow, to_sample  # what workers run
from conftest import alive
from test_workers import descendants

from tensorcom.errors import PeerLost, WorkerDied, WorkerError
from tensorcom.pipeline import Pipeline
from tensorcom.pipeline.serving import assign_urls, load_factory, serve
from tensorcom.transport.connection import Connection

pytestmark = [pytest.mark.net, pytest.mark.procs]


def in_thread(*args, **kwargs):
    """Run serve(*args, **kwargs) in a thread; returns (thread, result dict with "stats" or "error")."""
    result = {}

    def run():
        try:
            result["stats"] = serve(*args, **kwargs)
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def received_ids(batches):
    return sorted(int(i) for b in batches for i in b["i"])


def test_connecting_workers_share_one_group_per_epoch(free_port):
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        thread, result = in_thread("served:make_pipeline", f"zpush://127.0.0.1:{port}", workers=3,
                                   epochs=2, report=None)
        first, second = list(conn), list(conn)
        thread.join(timeout=30)
    # both passes end (3 markers each), and each holds exactly one epoch: a worker that finishes its
    # part first has its next epoch's batches held back until the others end theirs
    assert received_ids(first) == list(range(40)) and received_ids(second) == list(range(40))
    assert "error" not in result and result["stats"]["batches"] == len(first) + len(second)
    assert result["stats"]["samples"] == 80


def test_binding_urls_one_per_worker(free_port):
    ports = [free_port(), free_port()]
    pipeline = Pipeline(range(30)).map(to_sample).batch(4)
    thread, result = in_thread(pipeline, [f"zrpush://127.0.0.1:{p}" for p in ports], report=None)
    with Connection([f"zrpull://127.0.0.1:{p}" for p in ports], timeout=30) as conn:
        batches = list(conn)
    thread.join(timeout=30)
    assert received_ids(batches) == list(range(30)) and result["stats"]["workers"] == 2


def test_url_rules():
    assert assign_urls("zpush://127.0.0.1:7000", 3) == ([["zpush://127.0.0.1:7000"]] * 3, False)
    assert assign_urls("zpub://127.0.0.1:700{0..1}", None)[0] == [["zpub://127.0.0.1:7000"], ["zpub://127.0.0.1:7001"]]
    with pytest.raises(ValueError, match="one URL per worker"):
        assign_urls("zpub://127.0.0.1:7000", 2)
    with pytest.raises(ValueError, match="sending scheme"):
        assign_urls("zpull://127.0.0.1:7000", 1)
    with pytest.raises(ValueError, match="sharing"):
        assign_urls("zshare://127.0.0.1:7000", 1)
    with pytest.raises(ValueError, match="inproc"):
        assign_urls("zpush+inproc://x", 1)
    with pytest.raises(ValueError, match="all bind or all connect"):
        assign_urls(["zpub://127.0.0.1:7000", "zpush://127.0.0.1:7001"], 2)


def test_bad_pipelines_fail_in_the_parent():
    with pytest.raises(TypeError, match="module-level"):
        serve(Pipeline(range(3)).map(lambda x: x), "zpush://127.0.0.1:7000")
    with pytest.raises(ValueError, match="MODULE:FUNCTION"):
        serve("no_colon_here", "zpush://127.0.0.1:7000")
    with pytest.raises(ValueError, match="cannot load"):
        serve("test_serving:no_such_factory", "zpush://127.0.0.1:7000")


def test_worker_exception_reaches_the_parent_with_key_and_traceback(free_port):
    port = free_port()
    pipeline = Pipeline(range(40)).map(to_sample).map(fail_on_13).batch(2)
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30):
        before = set(descendants(os.getpid()))
        with pytest.raises(WorkerError) as info:
            serve(pipeline, f"zpush://127.0.0.1:{port}", workers=2, report=None)
    assert info.value.key == "s0013" and "fail_on_13" in info.value.remote_traceback
    assert "thirteen is unlucky" in str(info.value)
    assert [p for p in set(descendants(os.getpid())) - before if alive(p)] == []


def test_killed_worker_is_reported_within_seconds(free_port):
    port = free_port()
    pipeline = Pipeline(range(10**6)).map(to_sample).map(die_on_13).batch(2)
    start = time.monotonic()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=1) as conn:
        thread, result = in_thread(pipeline, f"zpush://127.0.0.1:{port}", workers=2, report=None)
        while thread.is_alive() and time.monotonic() - start < 30:  # what is measured is the serve's report
            try:
                conn.recv()
            except PeerLost:  # the receiver may notice the killed sender first
                break
            except TimeoutError:  # nothing for a second: look at the serve again
                pass
            thread.join(timeout=0.001)
    thread.join(timeout=30)
    assert isinstance(result.get("error"), WorkerDied), result
    assert "signal 9" in str(result["error"]) and time.monotonic() - start < 20


def test_rate_report_callback_and_stderr(free_port, capfd):
    port = free_port()
    reports = []
    pipeline = Pipeline(range(60)).map(to_sample).map(slow).batch(3)
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        thread, result = in_thread(pipeline, f"zpush://127.0.0.1:{port}", report=0.1, on_report=reports.append)
        assert received_ids(list(conn)) == list(range(60))
        thread.join(timeout=30)
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        thread, result = in_thread(make_pipeline(), f"zpush://127.0.0.1:{port}", report=0.1)
        assert len(list(conn)) == 8
        thread.join(timeout=30)
    assert reports and reports[-1]["batches"] == 20 and any(r["samples_per_s"] > 0 for r in reports)
    assert reports[0]["batches"] >= 1  # the first report comes after a batch, with a non-zero rate
    assert reports[0]["batches_per_s"] > 0 and reports[0]["samples_per_s"] > 0
    assert "batches/s" in capfd.readouterr().err


def test_report_counts_an_epoch_while_the_next_one_is_blocked(free_port):
    """A short epoch followed by a send that blocks (nobody reads) still shows in the reports."""
    port = free_port()
    counted = threading.Event()

    def on_report(stats):
        if stats["batches"] >= 4:
            counted.set()

    big = Pipeline(range(8)).map(big_sample).batch(2)
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30, rcvhwm=1) as conn:
        thread, result = in_thread(big, f"zpush://127.0.0.1:{port}", epochs=3, report=0.05,
                                   on_report=on_report, connection_options={"sndhwm": 1})
        assert len(list(conn)) == 4  # one epoch; the next epoch's sends now block
        assert counted.wait(timeout=30)  # nothing more is read until a report has counted that epoch
        assert len(list(conn)) == 4 and len(list(conn)) == 4
        thread.join(timeout=30)
    assert result["stats"]["batches"] == 12


PARENT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from served import to_sample, slow
    from tensorcom.pipeline import Pipeline
    from tensorcom.pipeline.serving import serve
    if __name__ == "__main__":
        pipeline = Pipeline(range(10**9)).map(to_sample).map(slow, workers=1, processes=True).batch(2)
        serve(pipeline, "zpush://127.0.0.1:{port}", workers=2, epochs=None, report=None)
""")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_kill_or_ctrl_c_of_the_serving_parent_leaves_no_orphan(popen, tmp_path, free_port, sig):
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(tests=os.path.dirname(__file__), port=free_port()))
    parent = popen.python(str(script))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(descendants(parent.pid)) < 4:  # 2 servers + 2 map workers
        time.sleep(0.1)
    children = descendants(parent.pid)
    assert len(children) >= 4
    os.kill(parent.pid, sig)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in children):
        time.sleep(0.05)
    assert [p for p in children if alive(p)] == []


def test_worker_memory_steady_over_thousands_of_batches(free_port):
    port = free_port()
    pipeline = Pipeline(range(24000)).map(to_sample).batch(8).map(add_rss)
    rss = []
    with Connection(f"zpull://127.0.0.1:{port}", timeout=60) as conn:
        thread, result = in_thread(pipeline, f"zpush://127.0.0.1:{port}", report=None)
        for batch in conn:
            rss.append(int(batch["rss"]))
        thread.join(timeout=30)
    assert len(rss) == 3000
    growth = max(rss[500:]) - rss[500]
    assert growth < 20 * 2**20, f"worker RSS grew by {growth / 2**20:.1f} MiB over 2500 batches"


def test_factory_module_in_the_current_directory(tmp_path, monkeypatch, free_port):
    (tmp_path / "my_feed.py").write_text(textwrap.dedent("""
        import numpy as np
        from tensorcom.pipeline import Pipeline

        def ident(i):
            return np.full(2, i, np.int32), np.int32(i)

        def make():
            return Pipeline(range(9)).map(ident).batch(3)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=10) as conn:
        thread, result = in_thread("my_feed:make", f"zpush://127.0.0.1:{port}", workers=2, report=None)
        try:
            batches = list(conn)
        finally:
            thread.join(timeout=30)
            assert "error" not in result, result
    assert sorted(int(x) for b in batches for x in b[1]) == list(range(9))
    assert all(np.array_equal(b[0][:, 0], b[1]) for b in batches)


# --- resume: a restarted server sends exactly what the consumer has not had -----------------------


RESUMABLE = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from tensorcom.pipeline.serving import serve
    if __name__ == "__main__":
        serve("served:resumable_pipeline", {url!r}, workers=2, report=None, connection_options={{"sndhwm": 1}})
""")


def keys_of(batches):
    return [key for batch in batches for key in batch["__key__"]]


def first_part(popen, port, state_path, command):
    """Start a server with `command` (popen args), take 5 batches, save the consumer state, SIGKILL the
    server's main process (its workers follow it); returns the keys received."""
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30, rcvhwm=1) as conn:
        server = popen.start(command)
        before = [conn.recv() for _ in range(5)]
        conn.save_state(state_path)
        assert server.poll() is None  # mid-epoch: its workers wait for the consumer to confirm the rest
        os.kill(server.pid, signal.SIGKILL)  # its main process (as the OOM killer): its workers follow it
        server.wait(timeout=10)
    state = json.loads(state_path.read_text())
    (stream,) = state["streams"].values()
    assert stream["workers"] == 2 and sum(s["batches"] for s in stream["shares"]) == 5
    return keys_of(before)


def rest_of_epoch(port, state_path, start):
    """A restarted consumer (loaded from `state_path`) takes the rest of the epoch `start()` serves."""
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        conn.load_state_dict(json.loads(state_path.read_text()))
        finish = start()
        after = list(conn)
        finish()
        state = conn.state_dict()
    (stream,) = state["streams"].values()
    assert stream["epoch"] == 1 and stream["shares"] == []  # the epoch is complete
    return keys_of(after)


def test_resumed_server_sends_exactly_the_rest_of_the_epoch(popen, tmp_path, free_port):
    """A server (serve() with 2 workers), killed; then `tensorcom serve FILE.py:FUNC URL -w 2 --epochs 1
    --resume FILE` sends exactly what the consumer has not had."""
    port, port2, state_path = free_port(), free_port(), tmp_path / "state.json"
    script = tmp_path / "server.py"
    script.write_text(RESUMABLE.format(tests=os.path.dirname(__file__), url=f"zpush://127.0.0.1:{port}"))
    before = first_part(popen, port, state_path, [sys.executable, str(script)])

    def start():
        factory = f"{os.path.dirname(__file__)}/served.py:resumable_pipeline"
        server = popen.start([sys.executable, "-m", "tensorcom.cli.main", "serve", "--resume", str(state_path),
                              factory, f"zpush://127.0.0.1:{port2}", "-w", "2", "--epochs", "1", "-r", "0"])
        return lambda: server.wait(timeout=30)

    after = rest_of_epoch(port2, state_path, start)
    assert len(before) == 20 and sorted(before + after) == [f"s{i:04d}" for i in range(60)]


def test_resume_state_must_fit_the_server(tmp_path):
    state = {"version": 1, "streams": {"serve-x": {"workers": 2, "epoch": 3, "shares": []}}}
    with pytest.raises(ValueError, match="has 2 portions"):
        serve(make_pipeline(), "zpush://127.0.0.1:7000", workers=3, resume=state, portions=3)
    with pytest.raises(ValueError, match="binding URL"):
        serve(make_pipeline(), "zpub://127.0.0.1:{7000..7002}", resume=state, epochs=9)
    with pytest.raises(ValueError, match="epoch 3"):
        serve(make_pipeline(), "zpush://127.0.0.1:7000", workers=2, epochs=2, resume=state)


def test_factory_given_as_a_file(tmp_path, free_port):
    feed = tmp_path / "sub" / "feed_file.py"
    feed.parent.mkdir()
    feed.write_text(textwrap.dedent("""
        import numpy as np
        from tensorcom.pipeline import Pipeline

        def ident(i):
            return (np.int32(i),)

        def make():
            return Pipeline(range(6)).map(ident).batch(2)
    """))
    assert load_factory(f"{feed}:make").__module__ == "feed_file"
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=10) as conn:
        thread, result = in_thread(f"{feed}:make", f"zpush://127.0.0.1:{port}", workers=2, report=None)
        batches = list(conn)
        thread.join(timeout=30)
    assert "error" not in result and sorted(int(x) for b in batches for x in b[0]) == list(range(6))
    with pytest.raises(ValueError, match="no file"):
        load_factory(f"{tmp_path}/missing.py:make")


def test_one_job_for_serving_processes_and_ray_actors(free_port):
    """Issue 17: tensorcom.serve's workers and tensorcom.ray's actors are given one ServeJob; worker
    i serves portions v % N == i, each portion's Connection carries it and the marker group of V."""
    from tensorcom.adapters.ray import _actors
    from tensorcom.pipeline.serving import ServeJob
    from tensorcom.transport.resume import ResumePlan

    assert not hasattr(_actors, "ActorJob")
    url = f"zpush://127.0.0.1:{free_port()}"
    job = ServeJob([[url], [url]], ResumePlan("s", 5, 3, {(3, 1): 5, (4, 0): 2}), {"linger": 0.0})
    assert (job.stream, job.portions, job.processes, job.portions_of(1)) == ("s", 5, 2, [1, 3])
    assert (len(job.plan.taken(3, 1)), len(job.plan.taken(4, 0)), len(job.plan.taken(3, 0))) == (5, 2, 0)
    conn = job.connect(3)
    try:
        assert (conn.group, conn.group_size, tuple(conn.portion)) == ("s", 5, ("s", 3, 5))
    finally:
        conn.close(linger=0.0)
