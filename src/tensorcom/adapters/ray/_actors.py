"""What runs in the Ray actors of tensorcom.ray: the feeds an actor serves (a pipeline spec, or one
part of a Ray Data dataset), ServerActor which sends them, and the named Directory of a serve's URLs.

The driver (tensorcom.adapters.ray._driver) creates one ServerActor per feed and calls its methods;
the actor never decides what to serve. Ray restarts a dead actor with the same constructor arguments
(a Stored reference to its feed, held by the driver), and the new incarnation is a new sender.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from dataclasses import dataclass
from typing import Any

from tensorcom import extras
from tensorcom.pipeline.portion_sending import Lane, send_epochs
from tensorcom.pipeline.serving import ServeJob, resolve
from tensorcom.pipeline.stage_times import StageClock

NAMESPACE = "tensorcom"  # the Ray namespace where named serves are registered (Directory actors)


def require_ray() -> Any:
    """The ray module; MissingDependency naming the extra ("tensorcom[ray]") when it is not installed."""
    return extras.require("ray")


def node_address(ray: Any) -> str:
    """This process's node address as the cluster knows it (ray.nodes()), else the address Ray guesses."""
    here = ray.get_runtime_context().get_node_id()
    known = [node["NodeManagerAddress"] for node in ray.nodes() if node.get("NodeID") == here]
    return known[0] if known else ray.util.get_node_ip_address()


def use_cache(directory: str | None) -> None:
    """Make `directory` (a path on this process's node; made when missing) the directory of the
    pipeline's cache(None) stages in this process (tensorcom.pipeline.cache.serve_in); None: nothing.
    Every node has its own: the actors of one node share its files, another node fills its own."""
    if directory is not None:
        from tensorcom.pipeline.cache import serve_in

        os.makedirs(directory, exist_ok=True)
        serve_in(directory)


def pipeline_in(spec: Any, cache: str | None) -> Any:
    """The Pipeline of `spec` (resolve) in a process whose cache(None) stages take `cache` (use_cache):
    what the driver's catch-up worker makes again."""
    use_cache(cache)
    return resolve(spec)


class PipelineFeed:
    """A pipeline spec (Pipeline, "module:function", "file.py:function", factory): `open(v, V)` builds
    portion v of V in the actor. Deterministic given (seed, epoch, v): restarts are exact, with any
    number of actors."""

    resumable = True

    def __init__(self, spec: Any):
        module, colon, name = spec.rpartition(":") if isinstance(spec, str) else ("", "", "")
        self.spec = f"{os.path.abspath(module)}:{name}" if colon and module.endswith(".py") else spec

    def open(self, index: int, workers: int) -> Any:
        return resolve(self.spec).shard(index, workers)


class DatasetFeed:
    """One Ray Data iterator (a part of `streaming_split`) as a portion: each epoch is one pass of its
    iter_batches, dicts of numpy arrays (columns of strings or objects as lists). Ray Data's order is
    not reproducible, so it is not resumable."""

    resumable = False

    def __init__(self, iterator: Any, batch_size: int, options: dict):
        self.iterator, self.batch_size, self.options = iterator, batch_size, options

    def open(self, index: int, workers: int) -> DatasetFeed:  # one portion per actor: V = N
        return self

    def set_epoch(self, epoch: int) -> None:
        pass

    def close(self) -> None:
        pass

    def __iter__(self) -> Any:
        for batch in self.iterator.iter_batches(batch_size=self.batch_size, batch_format="numpy", **self.options):
            yield {name: column.tolist() if column.dtype.kind in "OUSV" else column for name, column in batch.items()}


class _Never:
    """send_epochs's stop event and barrier in an actor: the driver orders the epochs and stops
    actors by killing them."""

    def is_set(self) -> bool:
        return False

    def wait(self) -> None:
        pass


@dataclass(frozen=True)
class Stored:
    """A reference to an object the driver keeps in Ray's object store (a nested ObjectRef, which Ray
    passes as it is instead of resolving)."""

    ref: Any

    def get(self) -> Any:
        return require_ray().get(self.ref)


class ServerActor:
    """One Ray actor: its portions of job.portions (at first those v with v % N == `index`,
    job.portions_of), each a lane (portion_sending.Lane) with its own Connection. Its methods run one
    at a time, in the order the driver calls them. hello() -> (incarnation, {portion: sender id}, pid,
    node, last epoch served) builds the portions and their Connections on the first call, their
    cache(None) stages in job.cache (use_cache; a restarted actor is a new incarnation, with new
    senders); run(first, last, plan, portions=None) sends epochs first..last of every lane, passing
    over the batch indices plan.taken(e, v) (a ResumePlan), each epoch followed by its markers, and
    returns (batches, samples, {portion: sender id}, (idle, busy)): the run's seconds waiting on the
    hub (blocked in send, then until the hub confirmed everything) and the rest of it; given
    `portions` other than its own (the driver re-dealt them: workers="auto"), it first closes the
    lanes of the portions it gives up (their Connections sent nothing since the last run) and builds
    those it takes; close() lets queued messages leave.

    With job.settle (the driver's hub receives), a run ends by closing its Connections, which waits
    until the hub confirmed everything they sent, resending what a dropped connection lost (an actor
    idle between runs would resend nothing, and the driver starts the next epoch only once the hub
    ended this one), and opens the next run's Connections: new senders, which take the portions over
    from the last ones (the hub retires them)."""

    def __init__(self, feed: Stored, index: int, job: ServeJob):
        self.feed, self.index, self.job = feed, index, job
        self.portions = job.portions_of(index)
        self.incarnation = f"{os.getpid()}:{secrets.token_hex(4)}"
        self.lanes: list[Lane] = []
        self.served: int | None = None

    def senders(self) -> dict[int, str]:
        return {lane.portion: lane.conn.sender for lane in self.lanes}

    def hello(self) -> tuple[str, dict[int, str], int, str, int | None]:
        if not self.lanes:
            if os.path.isdir(self.job.cwd) and self.job.cwd not in sys.path:
                sys.path.insert(0, self.job.cwd)
            use_cache(self.job.cache)
            feed = self.feed.get()
            self.lanes = [Lane(v, feed.open(v, self.job.portions), None) for v in self.portions]
        for lane in self.lanes:
            if lane.conn is None:
                lane.conn = self.job.connect(lane.portion)
        return self.incarnation, self.senders(), os.getpid(), node_address(require_ray()), self.served

    def run(self, first: int, last: int, plan: Any,
            portions: list[int] | None = None) -> tuple[int, int, dict[int, str], tuple[float, float]]:
        if portions is not None and list(portions) != self.portions:
            self._deal(list(portions))
        self.hello()
        start, clock, counts = time.perf_counter(), StageClock(), (0, 0)
        for counts in send_epochs(self.lanes, last - first + 1, first, _Never(), _Never(), plan.taken, clock):
            pass
        self.served = last if self.served is None else max(last, self.served)
        settling = time.perf_counter()
        if self.job.settle:
            for lane in self.lanes:
                conn, lane.conn = lane.conn, None
                conn.close(linger=None)  # until the hub confirmed everything (Undelivered if it went away)
                lane.conn = self.job.connect(lane.portion)
        end = time.perf_counter()
        idle = clock.totals.get("send", [0.0])[0] + end - settling  # waiting on the hub (and the consumers)
        return counts[0], counts[1], self.senders(), (idle, max(0.0, end - start - idle))

    def _deal(self, portions: list[int]) -> None:
        """Serve `portions` from now on: close the lanes of the others, keep those that stay (a lane
        not built yet is built by hello())."""
        kept = {lane.portion: lane for lane in self.lanes if lane.portion in portions}
        for lane in self.lanes:
            if lane.portion not in kept:
                lane.source.close()
                if lane.conn is not None:
                    lane.conn.close(linger=0)
        self.portions = portions
        if self.lanes:
            feed = self.feed.get()
            self.lanes = [kept[v] if v in kept else Lane(v, feed.open(v, self.job.portions), None) for v in portions]

    def close(self) -> None:
        for lane in self.lanes:
            if lane.conn is not None:
                lane.source.close()
                lane.conn.close(linger=self.job.options["linger"])
                lane.conn = None


class Directory:
    """A named actor (no CPU) holding a named serve's consumer URLs, for endpoints()."""

    def __init__(self, urls: list[str]):
        self._urls = urls

    def urls(self) -> list[str]:
        return self._urls
