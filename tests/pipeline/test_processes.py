"""The process owner: the pure Roster (which child is done, failed or dead), then real spawned
children: results, a child that raises, a SIGKILLed child, one whose pipe outlives it, close."""

import os
import queue
import signal

import pytest

from map_functions import blocking, counting, failing_one, forking_a_grandchild, killing_one  # the children's work
from tensorcom.errors import WorkerDied
from tensorcom.pipeline._failure import Failure
from tensorcom.pipeline._loop import one_task
from tensorcom.pipeline.processes import Entry, Processes, Roster, Threads


def failure(index):
    return Failure(index, 0, None, "ValueError", "bad", "Traceback ...")


# ---- the pure core -------------------------------------------------------------------------------


def test_roster_finishes_when_every_child_said_end():
    roster = Roster("portion worker", 2)
    assert roster.message(0, ("item", 0, "x")) == ("item", 0, "x")
    roster.message(0, ("end", 0, 1))
    assert not roster.finished and not roster.reading(0) and roster.reading(1)
    roster.message(1, ("end", 1, 0))
    roster.closed(0, 100, 0)  # a child that said its last word and left is not a death
    roster.closed(1, 101, 0)
    assert roster.finished and roster.due() is None


def test_roster_a_closed_channel_without_last_word_is_a_death_naming_pid_and_signal():
    roster = Roster("serving worker", 3)
    roster.message(0, ("item", 0, (1, 2)))
    roster.closed(2, 4242, -9)
    roster.closed(1, 4141, 3)
    died = roster.due()
    assert isinstance(died, WorkerDied)
    assert str(died) == "serving worker process 1 (pid 4141) exited with status 3"
    assert not roster.finished and not roster.reading(1) and roster.reading(0)


def test_roster_an_ended_child_is_dead_once_its_channel_was_quiet_for_the_grace():
    roster = Roster("map worker", 2, grace=1.0)
    roster.exited(1, 77, -15, now=10.0)
    roster.quiet(1, now=10.5)  # its last messages may still be on their way
    assert roster.due() is None and roster.reading(1)
    roster.quiet(0, now=20.0)  # a child that did not end is never due
    roster.quiet(1, now=11.0)
    assert str(roster.due()) == "map worker process 1 (pid 77) was killed by signal 15"


def test_roster_after_an_error_the_child_has_said_its_last_word():
    roster = Roster("portion worker", 1)
    message = ("error", 0, failure(0))
    assert roster.message(0, message) is message
    roster.closed(0, 5, 1)  # it exits 1 after reporting
    assert roster.due() is None and not roster.finished


def test_roster_without_ends_every_end_of_a_child_is_a_death():
    roster = Roster("map worker", 2, ends=False)
    roster.message(0, ("error", (0, 3), failure(0)))  # a map worker goes on after a failed task
    roster.message(0, ("end", 0, 0))
    assert roster.reading(0)
    roster.closed(0, 9, 1)
    assert "map worker process 0 (pid 9) exited with status 1" == str(roster.due())


def test_roster_a_revived_child_owes_its_last_word_again():
    """tensorcom.ray's driver: an actor restarted during an epoch runs again; the epoch is not over
    until that run has ended too."""
    roster = Roster("serving actor", 2)
    roster.message(0, ("end", 0, (4, 16)))
    roster.closed(1, 12, None)
    assert roster.due() is not None
    roster.revive(1)
    assert roster.due() is None and roster.reading(1) and not roster.finished
    roster.message(1, ("end", 1, (4, 16)))
    assert roster.finished


# ---- real processes ------------------------------------------------------------------------------


def read_all(owner, count):
    """Every message of `count` children until each said "end" (or WorkerDied)."""
    got = {}
    while not owner.roster.finished:
        message = owner.get(timeout=5.0)
        if message is not None:
            got.setdefault(message[1], []).append(message[0] if message[0] != "item" else message[2])
    return got


@pytest.mark.procs
def test_children_answer_on_their_pipes_and_end():
    owner = Processes("portion worker", 3)
    try:
        owner.start(Entry(counting), name="tensorcom-test")
        assert read_all(owner, 3) == {0: [0, 1, "end"], 1: [0, 1, 2, "end"], 2: [0, 1, 2, 3, "end"]}
        for proc in owner.procs:  # each leaves by itself after its end; close() would stop a late one
            proc.join(timeout=30)
    finally:
        owner.close()
    assert [p.exitcode for p in owner.procs] == [0, 0, 0]


@pytest.mark.procs
def test_a_child_that_raises_reports_its_failure_and_exits_1():
    owner = Processes("portion worker", 2)
    try:
        owner.start(Entry(failing_one), name="tensorcom-test")
        while True:
            kind, tag, value = owner.get(1, timeout=5.0) or ("none", None, None)
            if kind == "error":
                break
        error = value.error("portion worker")
        assert tag == 1 and str(error).startswith("portion worker 1 raised ValueError: worker 1 is bad\n")
        assert "failing_one" in error.remote_traceback
        owner.procs[1].join(timeout=10)
        assert owner.procs[1].exitcode == 1
    finally:
        owner.close()


@pytest.mark.procs
def test_a_sigkilled_child_is_worker_died_naming_the_signal():
    owner = Processes("map worker", 2)
    try:
        owner.start(Entry(killing_one), name="tensorcom-test")
        with pytest.raises(WorkerDied, match=r"map worker process 1 \(pid \d+\) was killed by signal 9"):
            read_all(owner, 2)
    finally:
        owner.close()


@pytest.mark.procs
def test_a_child_whose_pipe_a_grandchild_holds_is_dead_after_the_grace():
    owner = Processes("serving worker", 1, grace=0.5)
    grandchild = None
    try:
        owner.start(Entry(forking_a_grandchild), name="tensorcom-test")
        kind, _, grandchild = owner.get(0, timeout=30.0)
        assert kind == "item"
        with pytest.raises(WorkerDied, match=r"serving worker process 0 \(pid \d+\) exited with status 3"):
            while True:
                owner.get(0, timeout=5.0)
    finally:
        owner.close()
        if grandchild is not None:
            os.kill(grandchild, signal.SIGKILL)


@pytest.mark.procs
def test_get_returns_none_on_timeout_and_close_ends_a_stuck_child():
    owner = Processes("portion worker", 1, grace=0.2)
    owner.start(Entry(blocking), name="tensorcom-test")
    try:
        assert owner.get(0, timeout=30.0) == ("item", 0, 0)
        assert owner.get(0, timeout=0.2) is None
    finally:
        owner.close()
    assert not owner.procs[0].is_alive() and owner.procs[0].exitcode == -signal.SIGTERM


# ---- the thread twin -----------------------------------------------------------------------------


class Refusing:
    """An outbox whose put always fails: the worker loop itself ends."""

    def put(self, message, timeout=None):
        raise RuntimeError("refused")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_threads_answer_and_a_thread_that_ended_is_worker_died_once_its_answers_are_read():
    outboxes = [queue.Queue(), Refusing()]
    threads = Threads("portion worker", 2, counting, lambda i: one_task(i, tag=i), outboxes.__getitem__)
    try:
        for thread in threads.threads:
            thread.join(timeout=30)
        threads.check(0, drained=outboxes[0].empty)  # ended, its answers not read yet: no death
        assert [outboxes[0].get_nowait() for _ in range(3)] == [("item", 0, 0), ("item", 0, 1), ("end", 0, 2)]
        with pytest.raises(WorkerDied, match="portion worker thread 1 ended unexpectedly"):
            threads.check(1)
    finally:
        threads.close()
    assert threads.closed and not any(t.is_alive() for t in threads.threads)

