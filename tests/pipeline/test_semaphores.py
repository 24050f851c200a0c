"""The workers' multiprocessing primitives leave no semaphore name in /dev/shm, whatever happens to the
processes (tensorcom.pipeline._semaphores): unnamed semaphores, and where names exist, their removal
once every worker holds them."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import textwrap

import pytest

from tensorcom.pipeline import _semaphores
from tensorcom.pipeline._semaphores import Handover, UnnamedContext, context, semlocks

pytestmark = [pytest.mark.procs]

SHM = "/dev/shm"
needs_shm = pytest.mark.skipif(not os.path.isdir(SHM), reason="no /dev/shm on this system")


def shm_path(lock) -> str:
    """Where the named semaphore of `lock` lives (Linux: /dev/shm/sem.<name without the slash>)."""
    return os.path.join(SHM, "sem." + lock._semlock.name.lstrip("/"))


def meet(queue, event, barrier, value=None) -> None:
    """A worker: pass the barrier, add 1 to `value` under its lock, say hello on the queue, wait for
    the event (10 s at most)."""
    barrier.wait(timeout=10)
    if value is not None:
        with value.get_lock():
            value.value += 1
    queue.put(os.getpid())
    if not event.wait(timeout=10):
        raise SystemExit(3)


def meeting(procs: list, queue, event, started=lambda: None) -> None:
    """Start `procs` (each running `meet`), call started(), then check that each passed the barrier
    and said hello, and once the event is set, that each saw it; kills what is left."""
    try:
        for proc in procs:
            proc.start()
        started()
        assert sorted(queue.get(timeout=20) for _ in procs) == sorted(p.pid for p in procs)  # barrier and queue
        event.set()
        for proc in procs:
            proc.join(timeout=20)
        assert [proc.exitcode for proc in procs] == [0, 0]  # each saw the event
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)


@needs_shm
def test_names_leave_dev_shm_once_workers_hold_them_and_the_primitives_still_work():
    ctx = multiprocessing.get_context("spawn")
    queue, event, barrier = ctx.Queue(), ctx.Event(), ctx.Barrier(2)
    handover = Handover(ctx, [queue, event, barrier])
    locks = semlocks([queue, event, barrier])
    assert len(locks) >= 3 + 5 + 4  # queue: 2 locks + semaphore; event: condition (4) + flag; barrier: condition
    assert all(os.path.exists(shm_path(lock)) for lock in locks)

    def released() -> None:
        assert handover.release(timeout=60)
        assert [shm_path(lock) for lock in locks if os.path.exists(shm_path(lock))] == []

    meeting([handover.process(meet, (queue, event, barrier), daemon=True) for _ in range(2)], queue, event, released)


def test_a_child_that_dies_before_announcing_does_not_hold_release_up():
    ctx = multiprocessing.get_context("spawn")
    event = ctx.Event()
    handover = Handover(ctx, [event])
    proc = handover.process(os._exit, (0,), daemon=True)
    unstarted = handover.process(os._exit, (0,), daemon=True)  # never started: nothing to wait for
    assert unstarted.pid is None
    proc.start()
    assert handover.release(timeout=60)
    proc.join(timeout=20)
    assert proc.exitcode == 0


def test_unnamed_primitives_work_across_processes_and_make_nothing_in_dev_shm():
    ctx = context()
    if not isinstance(ctx, UnnamedContext):
        pytest.skip("no memfd_create or sem_init here: the primitives are multiprocessing's named ones")
    before = set(os.listdir(SHM)) if os.path.isdir(SHM) else set()
    queue, event, barrier, value = ctx.Queue(), ctx.Event(), ctx.Barrier(2), ctx.Value("q", 0)
    locks = semlocks([queue, event, barrier, value])
    assert len(locks) >= 3 + 5 + 4 + 1 and {lock._semlock.name for lock in locks} == {None}
    assert Handover(ctx, [queue, event, barrier, value]).locks == []  # no name to remove: plain processes
    with pytest.raises(RuntimeError):  # as multiprocessing's: given to a process only while it is spawned
        pickle.dumps(queue)
    meeting([ctx.Process(target=meet, args=(queue, event, barrier, value), daemon=True) for _ in range(2)],
            queue, event)
    assert value.value == 2  # each added 1 under the value's lock
    assert (set(os.listdir(SHM)) if os.path.isdir(SHM) else set()) == before


def test_without_memfd_the_context_is_multiprocessings_own(monkeypatch):
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setattr(_semaphores, "_slabs", [])  # no slab made before to hand semaphores out of
    assert context.__wrapped__() is multiprocessing.get_context("spawn")


WATCH = textwrap.dedent("""
    import json, os, signal, subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from conftest import private_shm

    def first_worker(pid):
        \"\"\"A spawned worker (multiprocessing's spawn_main) among the children of `pid`, else None.\"\"\"
        try:
            children = [int(c) for t in os.listdir(f"/proc/{pid}/task")
                        for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
        except OSError:
            return None
        for child in children:
            try:
                if b"spawn_main" in open(f"/proc/{child}/cmdline", "rb").read():
                    return child
            except OSError:
                pass
        return None

    why = private_shm()  # this process and all it starts: a /dev/shm of their own, empty
    if why is not None:
        print(json.dumps({"skip": why}))
        sys.exit(0)
    import ctypes
    ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: the run's orphans are this process's
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("the run did not end within 90 s"))
    signal.alarm(90)
    run = subprocess.Popen([sys.executable, "-c", sys.argv[3]], start_new_session=True)
    try:
        while first_worker(run.pid) is None and run.poll() is None:
            time.sleep(0.002)  # nothing tells when a process is made: /proc is polled
        at_first = sorted(os.listdir("/dev/shm"))
        if sys.argv[2] == "kill":
            os.killpg(run.pid, signal.SIGKILL)
        status = run.wait(timeout=60)
        while True:  # every process of the run has gone: nothing more can be made in /dev/shm
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    print(json.dumps({"status": status, "at_first_worker": at_first, "left": sorted(os.listdir("/dev/shm"))}))
""")


def watched(popen, how: str, code: str) -> tuple[dict, str]:
    """Run `python -c code` in a /dev/shm of its own (a mount namespace with an empty tmpfs) and
    watch it: /dev/shm when its first spawned worker exists, then (how="kill") SIGKILL its whole
    process group at once, or (how="wait") let it end; /dev/shm once every process of it has gone.
    Returns (the watcher's report, what the run printed); skips where no namespace can be made."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    watcher = popen.python("-c", WATCH, tests, how, code, stdout=subprocess.PIPE, text=True)
    out, _ = watcher.communicate(timeout=120)
    assert watcher.returncode == 0, out  # the run ended (or was killed) in time
    report = json.loads(out.strip().splitlines()[-1])
    if "skip" in report:
        pytest.skip(f"no /dev/shm of its own: {report['skip']}")
    return report, out


SERVE = textwrap.dedent("""
    import sys, tensorcom
    from tensorcom.pipeline import Pipeline
    tensorcom.serve(Pipeline(range(10**5)).batch(4), sys.argv[1], workers=2, epochs=None, report=None)
""")


@pytest.mark.net
def test_serve_killed_with_its_process_group_while_starting_leaves_no_name(popen, free_port):
    """serve() SIGKILLed with its whole process group (resource tracker included) as soon as its first
    worker exists, before any worker has opened the supervisor's stop event and barrier: no name was
    ever made, none is left."""
    report, _ = watched(popen, "kill", SERVE.replace("sys.argv[1]", repr(f"zpush://127.0.0.1:{free_port()}")))
    assert report["status"] == -signal.SIGKILL
    assert report["at_first_worker"] == [] and report["left"] == []


DROP = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    from map_functions import square
    from tensorcom.pipeline import Pipeline
    batches = iter(Pipeline(range(100)).map(square, workers=2, processes=True).batch(4))
    print("taken", [next(batches).tolist() for _ in range(3)], flush=True)
    del batches  # dropped without close(); the interpreter exits
""")


def test_a_pipeline_with_process_workers_dropped_without_close_leaves_no_name(popen):
    report, out = watched(popen, "wait", DROP.format(here=os.path.dirname(os.path.abspath(__file__))))
    assert "taken [[0, 1, 4, 9], [16, 25, 36, 49], [64, 81, 100, 121]]" in out
    assert report["status"] == 0
    assert report["at_first_worker"] == [] and report["left"] == []
