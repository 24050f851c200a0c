"""The catch-up worker of a served zshare stream: makes again the batches that a restarted consumer
lacks and the server's replay buffer no longer holds (tensorcom.transport.sharing.catch_up).

    worker = attach_catch_up(hub, make)    # make(): the served Pipeline; hub.server.catch_up is `worker`
    worker([Regenerate, ...])              # from the server's thread: queued, never blocks
    worker.close()                         # the hub closes it with itself

Each call's requests run in ONE spawned process (tensorcom.pipeline.processes), one run at a time,
requests that arrive meanwhile in the next run: for each (stream, epoch, portion v of V, indices)
it builds portion v's pipeline as serving process v of V does (`pipeline.shard(v, V)`, the epoch
set), passes over every batch not asked for and sends the asked ones to the server's catch-up input
(`CatchUpFeed`), which hands them to the consumers that lack them only. It stops reading a portion
after its last asked batch. Passing over is exact (a pipeline is deterministic given seed, epoch and
portion) and cheap: a batch or map stage passes over without collating or calling its function (its
randomness is keyed by position, tensorcom.pipeline._node.skip), so the CPU a catch-up costs is for
the batches it makes again plus the stages that must see every sample (source, shuffle buffer,
filter, and the maps before them). The process's messages to the owner are its counts: ("item", 0,
1) per batch sent; `made` counts them. A failed run is kept in `failure`, warned about, and its
requests are handed back by `take_failed()`, which the server polls to give them up (the consumers
waiting for them go on without them; the server's other
consumers are not affected). Who shuts down: close() stops the run and joins the thread.
"""

from __future__ import annotations

import functools
import queue
import sys
import threading
from typing import Any, Iterator

from tensorcom.pipeline._node import skip
from tensorcom.pipeline.processes import Entry, Processes

POLL = 0.1  # seconds between the thread's looks at its stop event


def regenerate(make: Any, address: str, asks: list, _payload: Any) -> Iterator[int]:
    """The child's work: send the batches `asks` name to `address`; yields 1 per batch sent."""
    from tensorcom.transport.sharing.hub import CatchUpFeed

    made = make()
    feed = CatchUpFeed(address)
    try:
        for ask in asks:
            source = made.shard(ask.portion, ask.workers)
            source.set_epoch(ask.epoch)
            try:
                for index, batch in asked_batches(iter(source), ask.indices):
                    feed.send(ask, index, batch)
                    yield 1
            finally:
                source.close()
    finally:
        feed.close()


def asked_batches(batches: Iterator[Any], indices: Any) -> Iterator[tuple[int, Any]]:
    """(index, batch) for the batches of one portion's epoch whose index is in `indices`, in order;
    the runs of batches before and between them are passed over (pipeline._node.skip: a map or batch
    stage does not compute what it passes over), and nothing is read past the last one."""
    position = 0
    for index in sorted(set(indices)):
        if index > position and skip(batches, index - position) < index - position:
            return  # the portion ended before it
        batch = next(batches, None)
        if batch is None:
            return
        yield index, batch
        position = index + 1


class CatchUpWorker:
    """The hook a sharing server calls with the batches to make again (module docstring). `make`: a
    picklable callable returning the served Pipeline; `address`: the server's catch-up input."""

    def __init__(self, make: Any, address: str):
        self.make, self.address = make, address
        self.made = 0  # batches made again and sent
        self.runs = 0
        self.failure: BaseException | None = None
        self._failed: queue.Queue = queue.Queue()  # the requests of failed runs, for take_failed()
        self._asks: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owner: Processes | None = None

    def __call__(self, asks: list) -> None:
        """Queue `asks` (catch_up.Regenerate); the thread starts on the first call."""
        self._asks.put(list(asks))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tensorcom-catch-up", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                asks = self._asks.get(timeout=POLL)
            except queue.Empty:
                continue
            while not self._asks.empty():
                asks.extend(self._asks.get())
            try:
                self._once(asks)
            except BaseException as exc:  # kept and told; the stream goes on without those batches
                self.failure = exc
                self._failed.put(asks)
                print(f"tensorcom: the catch-up worker failed ({exc}); {sum(len(a.indices) for a in asks)} "
                      "batches are not made again", file=sys.stderr, flush=True)

    def take_failed(self) -> list:
        """The requests of the runs that failed since the last call (the server gives them up)."""
        failed = []
        while not self._failed.empty():
            failed.extend(self._failed.get())
        return failed

    def _once(self, asks: list) -> None:
        """One run: one process for `asks`, read until its last word."""
        self._owner = owner = Processes("catch-up worker", 1, daemon=False)
        self.runs += 1
        try:
            owner.start(Entry(functools.partial(regenerate, self.make, self.address, asks)),
                        name="tensorcom-catch-up")
            while not self._stop.is_set():
                message = owner.get(0, POLL)
                if message is None:
                    continue
                if message[0] == "item":
                    self.made += 1
                elif message[0] == "error":
                    raise message[2].error("catch-up worker")
                else:
                    return
        finally:
            owner.close()

    def close(self) -> None:
        """Stop the current run and the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def attach_catch_up(hub: Any, make: Any) -> CatchUpWorker:
    """Give `hub` (a sharing Hub fed by tensorcom.serve) a catch-up worker for the Pipeline make() returns."""
    worker = CatchUpWorker(make, hub.server.catch_up_address)
    hub.catch_up = hub.server.catch_up = worker
    return worker
