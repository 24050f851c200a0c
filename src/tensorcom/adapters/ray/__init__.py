"""`tensorcom.ray`: augmentation servers as Ray actors across a cluster, feeding trainers that need not
be Ray programs (any framework; another language through docs/protocol.md). Guide: docs/ray.md.

    tensorcom.ray.serve("mymodule:make_pipeline", "zsplit://0.0.0.0:7880", workers=8, epochs=90)
    with tensorcom.ray.start(pipeline, "zshare://0.0.0.0:*", workers=4, name="imagenet") as serving:
        serving.urls                          # ["zjoin://10.0.0.5:41234"]: what trainers join
        serving.wait()                        # every epoch served and consumed: the totals
    tensorcom.ray.endpoints("imagenet")       # those URLs, from any program connected to the cluster
    tensorcom.ray.serve_dataset(ray.data.read_parquet(...), "zsplit://0.0.0.0:7880", workers=2)

The driver (the calling process) runs a sharing server (tensorcom.transport.sharing.Hub) bound to the
trainer-facing zshare/zsplit URL, its input on tcp on the driver's node. Actor i of N (ServerActor)
builds the portions v of V with v % N == i of the pipeline (V: `portions=`, default N; with `resume=`,
the state's) and pushes each there through a Connection tagged with its portion (stream, v, V); the V
portions form one marker group. Epoch by epoch the driver calls `run` on every
actor, then waits until the hub's input has ended the epoch, so no actor runs ahead and when epoch
e+1 starts everything of epoch e is in the hub.

Across dropped connections: the hub confirms what it takes to each actor's Connection, which
resends what a dropped or stalled connection lost, and drops what comes twice; a run ends once the
hub confirmed all it sent (the next run is a new Connection, a new sender that takes the portion
over). So a connection reset or a short partition between an actor and the hub loses, repeats and
reorders nothing (docs/reliability.md).

Restart without loss: Ray restarts a dead actor (`max_restarts`); its new incarnation has new
senders. The driver sees the failed call (or, between calls, a new incarnation from `hello`), and for
each portion v of the actor calls `hub.server.handover(stream, v, V, retire=[its last sender])`: from
then on whatever still arrives from the dead incarnation is dropped, and the returned ResumePlan holds
which batches of portion v the hub took in each unfinished epoch. The new incarnation serves those
epochs again, passing over exactly those (portion_sending.untaken; pipelines are deterministic given
seed, epoch and portion), and ends each once more. With connecting URLs (zpush, zrpub: actors push
straight to a trainer that binds) nothing counts what arrived, so a dead actor ends the serve with
WorkerDied.

Actors that scale themselves (workers="auto", sharing URLs only): V fixed, min_workers actors at
first; the driver feeds an autoscaler once a second and changes the actors only at an epoch
boundary, giving each run its portions v % N' == i (_scaling; docs/ray.md).

Who shuts down: close() (the end of serve(), Ctrl-C, an error, interpreter exit) stops the driver
thread, kills every actor and the hub, and shuts Ray down when start() started it; a driver that dies
takes its actors along (Ray kills the actors of a dead owner).

Modules: _actors (what runs in the actors: the feeds, ServerActor, Directory), _driver (Serving: the
epochs, restarts and rescaling), _figures (the reports and the metrics endpoint), _scaling
(workers="auto": checks and ActorScaling); this module holds the entry points and checks the options.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from typing import Any, Callable

from tensorcom.checks import positive as _positive
from tensorcom.adapters.ray._actors import (
    NAMESPACE,
    DatasetFeed,
    PipelineFeed,
    node_address,
    pipeline_in,
    require_ray,
)
from tensorcom.adapters.ray._driver import Plan, Serving
from tensorcom.adapters.ray._scaling import UNDECIDED, ActorScaling, actor_ceiling, check_auto
from tensorcom.pipeline.serving import (
    DEFAULT_LINGER,
    ServeJob,
    assign_urls,
    check_spec,
    resume_plan,  # serve()'s one rule for `resume`
)
from tensorcom.pipeline.shared_serving import is_sharing
from tensorcom.transport.resume import ResumePlan

__all__ = ["Serving", "endpoints", "serve", "serve_dataset", "start"]


def start(pipeline: Any, url: Any, *, workers: int | str = 2, min_workers: int | None = None,
          max_workers: int | None = None, scaler: Any = None, **options: Any) -> Serving:
    """Start serving `pipeline` (a Pipeline, "module:function", "file.py:function" or a picklable
    factory) from `workers` Ray actors to `url`; returns the running Serving. `options`: those of
    start_feeds. workers="auto" (sharing URLs): actors that scale themselves, from `min_workers`
    (default 1) to `max_workers` (default: Ray's CPUs / CPUs per actor, at most V), V = `portions`
    (or the resumed state's), else max_workers; their number changes only at an epoch boundary;
    `scaler`: what decides (default a tensorcom.pipeline.autoscale.Autoscaler; any object with its
    observe(), and optionally decided(target)). ValueError for bad options or a resume state that does
    not fit them, before Ray starts, with either kind of `workers`; with workers="auto", also once Ray
    runs (before any actor) when min_workers actors do not fit its CPUs or V."""
    if workers != "auto":
        if min_workers is not None or max_workers is not None or scaler is not None:
            raise ValueError(f"min_workers, max_workers and scaler go with workers='auto', not workers={workers!r}")
        count, scaling = _positive("workers", workers), None
    else:
        minimum, maximum = check_auto(min_workers, max_workers, url, options.get("portions"))
        count, scaling = 1, (minimum, maximum, scaler)
    require_ray()
    check_spec(pipeline)
    return start_feeds([PipelineFeed(pipeline)] * count, url, scaling=scaling, **options)


def serve(pipeline: Any, url: Any, **options: Any) -> dict:
    """start(pipeline, url, **options), print where consumers connect and where the actors run (unless
    report is None), wait until everything is served (and, sharing, consumed), stop. Returns the
    totals; raises WorkerError (an actor's pipeline raised), WorkerDied (an actor could not be
    brought back), Undelivered (sharing: consumers did not get everything)."""
    with start(pipeline, url, **options) as serving:
        if serving.plan.report:
            places = ", ".join(f"pid {m.pid} on {m.node}" for m in serving.members)
            print(f"consumers join {' '.join(serving.urls)}; {len(serving.members)} Ray actor(s): {places}",
                  file=sys.stderr, flush=True)
        return serving.wait()


def serve_dataset(dataset: Any, url: Any, *, workers: int = 1, batch_size: int = 256,
                  iter_options: dict | None = None, **options: Any) -> dict:
    """Serve a ray.data.Dataset's batches (iter_batches(batch_size, batch_format="numpy"): dicts of
    arrays) from `workers` actors, each iterating one part of `dataset.streaming_split(workers)`, to
    `url`, then stop; returns the totals. `options` as start_feeds, except that a dead actor ends the
    serve (WorkerDied). iter_options: more iter_batches keywords (prefetch_batches, drop_last, ...)."""
    require_ray()
    count = _positive("workers", workers)
    iterators = dataset.streaming_split(count) if count > 1 else [dataset.iterator()]
    feeds = [DatasetFeed(iterator, batch_size, dict(iter_options or {})) for iterator in iterators]
    with start_feeds(feeds, url, **{**options, "max_restarts": 0}) as serving:
        return serving.wait()


def endpoints(name: str, address: str | None = None) -> list[str]:
    """The consumer URLs of the serve started with `name=name`, from any program connected to the
    cluster (not connected yet: joins `address`, default "auto", the cluster `ray start` runs here)."""
    ray = require_ray()
    if not ray.is_initialized():
        ray.init(address=address or "auto")
    return ray.get(ray.get_actor(f"serve:{name}", namespace=NAMESPACE).urls.remote())


def start_feeds(feeds: list, url: Any, *, epochs: int | None = 1, first_epoch: int = 0, resume: Any = None,
                resources: dict | None = None, placement_group: Any = None, max_restarts: int = 3,
                address: str | None = None, host: str | None = None, name: str | None = None,
                report: float | None = 10.0, on_report: Callable[[dict], None] | None = None,
                min_consumers: int = 1, sharing: dict | None = None, curve: Any = None,
                connection_options: dict | None = None, linger: float = DEFAULT_LINGER,
                portions: int | None = None, scaling: tuple | None = None, cache: Any = None,
                metrics: str | None = None) -> Serving:
    """Start one actor per feed (actor i serves feeds[i].open(v, V) for its portions v) sending to `url`.

    url: zshare:// or zsplit:// (the driver binds it; "HOST:*" takes a free port; actors restart without
    loss), or connecting zpush:// / zrpub:// URLs (every actor connects; the trainer binds; no restarts).
    epochs (None: forever) numbered from first_epoch; resume: a consumer's state or its file, as
    tensorcom.serve. resources: per actor, {"num_cpus": 1 (default), "num_gpus", "memory", any custom
    resource: amount}; placement_group: actor i in bundle i (modulo the bundles), else Ray spreads the
    actors over the nodes. max_restarts: per actor. address: the cluster to join when this program is
    not connected yet (None: the one `ray start` runs here, else a new local instance, shut down by
    close()). host: where the hub's input binds (default: the driver's node address). name: register
    the consumer URLs for endpoints(name). report, on_report, min_consumers, sharing, curve,
    connection_options, linger: as tensorcom.serve. portions: V, the stream's portions (default: one
    per actor; with `resume`, the state's), actor i serving those v with v % N == i: the batches and
    their order depend on the seed, the epoch and V, not on the number of actors. scaling: start()'s
    (min_workers, max_workers, scaler) of workers="auto" (check_auto's), `feeds` then being the one
    PipelineFeed every actor serves. cache: the directory of the
    pipeline's cache(None) stages (decoded images, tensorcom.pipeline.cache), the same path on every
    node (relative: to this process's working directory) and each node's own: its actors share its
    files; a node without the directory makes it. metrics: "HOST:PORT" (port 0: a free one) of the
    driver's metrics endpoint, as tensorcom.serve's: the hub's totals and consumers (their data wait),
    the actors and their runs' seconds waiting on the hub (idle) and the rest (busy).

    The stream's plan (resume_plan: its V, first epoch, what the consumers have) is made once, before
    Ray starts, for a fixed number of actors and workers="auto" alike, and so is every ValueError of
    the options and the resume state; once Ray runs, workers="auto" decides what needs its CPUs
    (auto_actors: an UNDECIDED V, the most actors, ValueError when min_workers do not fit)."""
    ray = require_ray()
    sharing_urls = check_urls(url, len(feeds))
    cache = None if cache is None else os.path.abspath(cache)
    if epochs is not None:
        _positive("epochs", epochs)
    if not sharing_urls and (min_consumers != 1 or sharing):
        raise ValueError(f"min_consumers={min_consumers} and sharing={sharing!r} need zshare:// or zsplit:// URLs, "
                         f"not {url!r}")
    # the stream's plan, once, before Ray starts: V = portions, the resumed state's, else one per actor
    # (auto: max_workers, or UNDECIDED when not given, which auto_actors decides once Ray runs)
    resumed = resume_plan(resume, len(feeds) if scaling is None else scaling[1] or UNDECIDED, first_epoch, epochs,
                          portions)
    if scaling is None:
        if resumed.portions != len(feeds) and not all(feed.resumable for feed in feeds):
            raise ValueError(f"a Ray Data dataset is served in one portion per actor: {len(feeds)} actors cannot "
                             f"serve {resumed.portions} portions")
        feeds = feeds[:resumed.portions]  # every actor serves at least one portion
    own_ray = not ray.is_initialized()
    if own_ray:
        ray.init(address=address, **({"include_dashboard": False} if address is None else {}))
    serving = hub = auto = None
    try:
        if scaling is not None:
            auto, resumed = auto_actors(ray, scaling, resources, resumed)
            feeds = feeds * auto.ceiling  # the feed of every actor there can be
        if sharing_urls:
            from tensorcom.transport.sharing.hub import Hub

            hub = Hub(url, curve=curve, input_host=host or node_address(ray),
                      min_consumers=min_consumers, **(sharing or {}))
            attach_catch_up_of(hub, feeds, cache)
        options = {"allow64": True, **({"curve": curve} if curve is not None and hub is None else {}),
                   **(connection_options or {}), "linger": linger}
        urls = [hub.worker_url] if hub else list(url) if isinstance(url, list) else [url]
        actors = len(feeds) if auto is None else auto.target
        job = ServeJob([urls] * actors, resumed, options, cwd=os.getcwd(), settle=hub is not None, cache=cache)
        restarts = max_restarts if hub is not None else 0
        plan = Plan(hub, job, None if epochs is None else first_epoch + epochs - resumed.epoch,
                    [actor_options(i, resources, placement_group, restarts) for i in range(len(feeds))],
                    report, on_report, own_ray, auto, metrics)
        serving = Serving(ray, feeds, plan)
        return serving.launch(name)
    except BaseException:
        if serving is not None:
            serving.close()
        else:
            if hub is not None:
                hub.abort()
            if own_ray:
                ray.shutdown()
        raise


def auto_actors(ray: Any, scaling: tuple, resources: dict | None,
                resumed: ResumePlan) -> tuple[ActorScaling, ResumePlan]:
    """workers="auto" once Ray runs: the driver's ActorScaling and the stream's plan `resumed`, its V
    decided when start_feeds left it UNDECIDED (a fresh stream without portions or max_workers):
    max_workers' default, Ray's CPUs / CPUs per actor (at least min_workers); ValueError when
    min_workers actors do not fit (actor_ceiling: V, max_workers, Ray's CPUs)."""
    from tensorcom.pipeline.autoscale import Autoscaler

    minimum, maximum, scaler = scaling
    per_actor = float(actor_options(0, resources, None, 0).get("num_cpus", 1))
    cpus = float(ray.cluster_resources().get("CPU", 0))
    if maximum is None:
        maximum = max(int(cpus // per_actor) if per_actor > 0 else minimum, minimum)
    if resumed.portions == UNDECIDED:
        resumed = dataclasses.replace(resumed, portions=maximum)
    ceiling = actor_ceiling(minimum, maximum, resumed.portions, cpus, per_actor)
    scaler = scaler if scaler is not None else Autoscaler(minimum, ceiling, cores=ceiling)
    return ActorScaling(scaler, minimum, ceiling), resumed


def attach_catch_up_of(hub: Any, feeds: list, cache: str | None = None) -> None:
    """Give the driver's hub a catch-up worker (tensorcom.pipeline.catch_up: a local process that makes
    again what a restarted job lacks and the replay buffer no longer holds) when the actors serve one
    pipeline spec, its cache(None) stages in `cache` on the driver's node; Ray Data feeds cannot be
    made again (their order is not reproducible)."""
    if feeds and all(isinstance(feed, PipelineFeed) for feed in feeds):
        from tensorcom.pipeline.catch_up import attach_catch_up

        attach_catch_up(hub, functools.partial(pipeline_in, feeds[0].spec, cache))


def actor_options(index: int, resources: dict | None, placement_group: Any, max_restarts: int) -> dict:
    """Ray's .options() for actor `index`: its resources, placement, restarts (and no retried calls:
    the driver decides what a restarted actor serves)."""
    wanted = {"num_cpus": 1, **(resources or {})}
    options: dict = {key: wanted.pop(key) for key in ("num_cpus", "num_gpus", "memory") if key in wanted}
    if wanted:
        options["resources"] = wanted
    options["scheduling_strategy"] = "SPREAD"
    if placement_group is not None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = index % len(placement_group.bundle_specs)
        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(placement_group,
                                                                          placement_group_bundle_index=bundle)
    return {**options, "max_restarts": max_restarts, "max_task_retries": 0}


def check_urls(url: Any, workers: int) -> bool:
    """True for sharing URLs (the driver binds them), False for URLs every actor connects to;
    ValueError (naming the URL) for others: one that binds, or that serve's rules refuse (assign_urls)."""
    from tensorcom.urls import parse_all

    if is_sharing(url):
        return True
    for endpoint in parse_all(url):
        if endpoint.bind:
            raise ValueError(f"{endpoint.url}: Ray actors push to a sharing server the driver binds (zshare://, "
                             "zsplit://) or connect to a trainer that binds (zpush://, zrpub://); not to a URL each "
                             "would bind")
    assign_urls(url, workers)
    return False


