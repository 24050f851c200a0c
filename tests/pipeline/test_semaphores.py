"""Named semaphores of multiprocessing primitives leave /dev/shm once every worker holds them
(tensorcom.pipeline._semaphores), so a SIGKILL of a whole process group leaves none behind."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import textwrap

import pytest

from tensorcom import Connection
from tensorcom.pipeline._semaphores import Handover, semlocks

pytestmark = [pytest.mark.procs]

SHM = "/dev/shm"
needs_shm = pytest.mark.skipif(not os.path.isdir(SHM), reason="no /dev/shm on this system")


def shm_path(lock) -> str:
    """Where the named semaphore of `lock` lives (Linux: /dev/shm/sem.<name without the slash>)."""
    return os.path.join(SHM, "sem." + lock._semlock.name.lstrip("/"))


def meet(queue, event, barrier) -> None:
    """A worker: pass the barrier, say hello on the queue, wait for the event (10 s at most)."""
    barrier.wait(timeout=10)
    queue.put(os.getpid())
    if not event.wait(timeout=10):
        raise SystemExit(3)


@needs_shm
def test_names_leave_dev_shm_once_workers_hold_them_and_the_primitives_still_work():
    ctx = multiprocessing.get_context("spawn")
    queue, event, barrier = ctx.Queue(), ctx.Event(), ctx.Barrier(2)
    handover = Handover(ctx, [queue, event, barrier])
    locks = semlocks([queue, event, barrier])
    assert len(locks) >= 3 + 5 + 4  # queue: 2 locks + semaphore; event: condition (4) + flag; barrier: condition
    assert all(os.path.exists(shm_path(lock)) for lock in locks)
    procs = [handover.process(meet, (queue, event, barrier), daemon=True) for _ in range(2)]
    try:
        for proc in procs:
            proc.start()
        assert handover.release(timeout=60)
        assert [shm_path(lock) for lock in locks if os.path.exists(shm_path(lock))] == []
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


SERVER = textwrap.dedent("""
    import sys
    from multiprocessing import synchronize
    from tensorcom.pipeline import Pipeline, _semaphores

    made = synchronize.SemLock._make_name
    def recorded():
        name = made()
        print("sem", name, flush=True)
        return name
    synchronize.SemLock._make_name = staticmethod(recorded)
    release = _semaphores.Handover.release
    def announced(self, *args, **kwargs):
        print("released", release(self, *args, **kwargs), flush=True)
    _semaphores.Handover.release = announced

    import tensorcom
    tensorcom.serve(Pipeline([(i,) for i in range(10**5)]).batch(4), sys.argv[1], workers=2, epochs=None, report=None)
""")


@needs_shm
@pytest.mark.net
def test_serve_killed_with_its_process_group_leaves_no_semaphore(popen, free_port):
    """serve() in a subprocess; once its workers hold the supervisor's stop event and barrier (their
    results come on pipes, which have no names), their names are gone; it serves on; SIGKILL of the whole group (resource tracker too) leaves nothing."""
    url = f"127.0.0.1:{free_port()}"
    with Connection(f"zpull://{url}", timeout=60) as receiver:
        server = popen.python("-c", SERVER, f"zpush://{url}", stdout=subprocess.PIPE, text=True)
        names, line = [], server.stdout.readline()
        while line.startswith("sem "):
            names.append(line.split()[1])
            line = server.stdout.readline()
        assert line.strip() == "released True", line
        paths = [os.path.join(SHM, "sem." + name.lstrip("/")) for name in names]
        assert len(paths) >= 9 and [p for p in paths if os.path.exists(p)] == []
        assert len([receiver.recv() for _ in range(20)]) == 20  # the workers go on without the names
        os.killpg(server.pid, signal.SIGKILL)
        assert server.wait(timeout=20) == -signal.SIGKILL
    assert [p for p in paths if os.path.exists(p)] == []


