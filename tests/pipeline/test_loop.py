"""The one worker loop (tensorcom.pipeline._loop) and the one failure record (_failure), without processes."""

import pickle
import queue
import threading

import pytest

from tensorcom.errors import WorkerError
from tensorcom.pipeline._failure import Failure, died
from tensorcom.pipeline._loop import one_task, worker_loop


def halves(n):
    for i in range(n):
        if i == 3:
            raise ZeroDivisionError("three")
        yield i / 2


def run(work, inbox, size=0):
    outbox, stop = queue.Queue(size), threading.Event()
    clean = worker_loop(work, inbox, outbox, stop, 7)
    return clean, [outbox.get_nowait() for _ in range(outbox.qsize())]


def test_items_then_end_or_error_with_the_failing_position():
    assert run(halves, one_task(2, tag="a")) == (True, [("item", "a", 0.0), ("item", "a", 0.5), ("end", "a", 2)])
    clean, messages = run(halves, one_task(5, tag="b", first=10))
    assert not clean and [m[0] for m in messages] == ["item"] * 3 + ["error"]
    failure = messages[-1][2]
    assert (failure.worker, failure.position, failure.exc_type, failure.message) == (7, 13, "ZeroDivisionError", "three")
    assert "in halves" in failure.traceback and isinstance(failure.cause, ZeroDivisionError)


def test_stop_ends_the_loop_while_the_outbox_is_full_and_closes_the_values():
    closed = threading.Event()

    def endless(_):
        try:
            while True:
                yield 1
        finally:
            closed.set()

    outbox, stop = queue.Queue(2), threading.Event()
    thread = threading.Thread(target=worker_loop, args=(endless, one_task(None), outbox, stop, 0))
    thread.start()
    while not outbox.full():
        pass
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and closed.is_set()


class Unpicklable(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.lock = threading.Lock()


def test_a_failure_pickles_as_plain_data_whatever_the_exception():
    try:
        raise Unpicklable("locked in")
    except Unpicklable as exc:
        failure = Failure.capture(exc, 2, 5, key="k5")
    with pytest.raises(TypeError):
        pickle.dumps(failure.cause)
    copy = pickle.loads(pickle.dumps(failure))
    assert copy == failure and copy.cause is None
    error = copy.error("map worker")
    assert str(error).startswith("map worker 2 raised Unpicklable: locked in (sample 'k5')")
    assert error.failure is copy and error.key == "k5" and "locked in" in error.remote_traceback


def test_a_nested_worker_error_keeps_its_key_and_traceback():
    inner = Failure(0, 1, "k1", "ValueError", "inner", "remote tb").error("map worker")
    outer = Failure.capture(inner, 3)
    assert (outer.key, outer.traceback, outer.message) == ("k1", "remote tb", "map worker 0 raised ValueError: inner")
    assert isinstance(outer.error("serving worker"), WorkerError)


def test_died_names_threads_and_processes():
    thread = threading.Thread(target=lambda: None)
    assert str(died("portion worker", 1, thread)) == "portion worker thread 1 ended unexpectedly"
