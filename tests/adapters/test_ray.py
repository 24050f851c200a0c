"""tensorcom.ray on a local Ray instance (ray.init(num_cpus=2), ray_instance: one per pytest process,
shared with test_ray_reconnect.py, tests/conftest.py): two actors deliver one epoch exactly; an actor
killed mid-epoch is restarted and the epoch still arrives whole with no duplicate; a pipeline that
raises ends the serve with WorkerError; an actor pushes to a trainer that binds; a Ray Data dataset
reaches a plain consumer; no actor outlives its serve; workers="auto" grows from one actor to two and
back to one at epoch boundaries, every epoch exact, and decides only what needs Ray's CPUs once Ray
runs; actors fill a cache of their node. join_url, actor_options and the options' checks without Ray.

The actors build their pipeline from this file ("tests/adapters/test_ray.py:make_ids"), so this
module is also imported in the actors' processes."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.net, pytest.mark.procs, pytest.mark.xdist_group("ray")]  # one worker, one instance

SAMPLES = 240  # sample ids 0..239 per epoch
BATCH = 4
FACTORY = f"{os.path.abspath(__file__)}:make_ids"


def slow_id(sample: int) -> dict:
    time.sleep(0.004)  # an epoch takes about 0.5 s per actor: long enough to kill one in its middle
    return {"id": np.int64(sample)}


def make_ids():
    """The served pipeline: ids 0..SAMPLES-1, batches of BATCH (the actors take portions of it)."""
    from tensorcom.pipeline import Pipeline

    return Pipeline(list(range(SAMPLES)), seed=0).map(slow_id).batch(BATCH)


def broken_id(sample: int) -> dict:
    if sample == 9:
        raise ValueError(f"bad sample {sample}")
    return {"id": np.int64(sample)}


def make_broken():
    """A pipeline whose function raises on sample 9 (in its third batch)."""
    from tensorcom.pipeline import Pipeline

    return Pipeline(list(range(SAMPLES)), seed=0).map(broken_id).batch(BATCH)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pids: list[int], timeout: float = 20.0) -> list[int]:
    """The pids still alive after up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [pid for pid in pids if alive(pid)]


def consume(url: str, ids: list, during=None) -> None:
    """Join `url` and collect one pass's ids; `during(batches_so_far)` after each batch."""
    from tensorcom import Connection

    with Connection(url, credit=2, timeout=60) as conn:
        for batch in conn:
            ids.extend(int(i) for i in batch["id"])
            if during is not None:
                during(len(ids) // BATCH)


def test_two_actors_deliver_one_epoch_exactly(ray_instance, free_port):
    """...and the driver's metrics endpoint (metrics=) tells the hub's totals, the actors and the
    seconds their runs waited on the hub (its consumers' records: tensorcom.pipeline.observe's, as
    tensorcom.serve's, tests/pipeline/test_observe.py)."""
    import json
    import urllib.request

    from tensorcom.adapters import ray as tray

    url = f"zsplit://127.0.0.1:{free_port()}"
    ids: list[int] = []
    with tray.start(FACTORY, url, workers=2, epochs=1, host="127.0.0.1", report=None, name="ids",
                    metrics="127.0.0.1:0") as serving:
        assert serving.urls == [url.replace("zsplit", "zjoin")]
        assert tray.endpoints("ids") == serving.urls  # what a trainer connected to the cluster finds
        consume(serving.urls[0], ids)
        result = serving.wait(timeout=60)
        pids = [m.pid for m in serving.members]
        assert len(set(pids)) == 2 and all(alive(pid) for pid in pids)
        base = serving.figures.endpoint.url
        record = json.loads(urllib.request.urlopen(base + "status.json", timeout=10).read())
        metrics = urllib.request.urlopen(base + "metrics", timeout=10).read().decode()
    assert record["workers"] == 2 and record["batches"] == SAMPLES // BATCH
    assert record["idle_s"] > 0 and record["busy_s"] > 0 and "tensorcom_workers 2.0" in metrics
    assert sorted(ids) == list(range(SAMPLES))
    assert result["batches"] == SAMPLES // BATCH and result["samples"] == SAMPLES and result["restarts"] == 0
    assert wait_gone(pids) == []
    assert ray.util.list_named_actors(all_namespaces=True) == []


def test_actors_killed_mid_epoch_are_restarted_and_nothing_is_lost_or_repeated(ray_instance, free_port):
    from tensorcom.adapters import ray as tray

    url = f"zsplit://127.0.0.1:{free_port()}"
    passes: list[list[int]] = [[], []]
    killed: list[int] = []
    with tray.start(FACTORY, url, workers=2, epochs=2, host="127.0.0.1", report=None) as serving:

        def kill_in(epoch: int, batches: int) -> None:
            """Mid-epoch (10 of 60 batches in): epoch 0 loses actor 1 to ray.kill, epoch 1 actor 0 to SIGKILL."""
            if len(killed) == epoch and batches >= 10:
                victim = serving.members[1 - epoch]
                killed.append(victim.pid)
                if epoch == 0:
                    ray.kill(victim.actor, no_restart=False)  # Ray restarts it (max_restarts)
                else:
                    os.kill(victim.pid, signal.SIGKILL)

        for epoch in range(2):
            consume(serving.urls[0], passes[epoch], lambda batches, epoch=epoch: kill_in(epoch, batches))
        result = serving.wait(timeout=60)
        pids = [m.pid for m in serving.members]
    assert sorted(passes[0]) == list(range(SAMPLES)), "epoch 0: every id once"
    assert sorted(passes[1]) == list(range(SAMPLES)), "epoch 1: every id once"
    assert result["restarts"] == 2 and not set(killed) & set(pids)
    assert wait_gone(pids + killed) == []


def test_a_killed_driver_takes_its_actors_along(ray_instance, free_port, popen):
    """`tensorcom serve --ray 2 --address CLUSTER` (a subprocess) starts its actors, then is killed
    before any consumer joined: Ray kills the actors of a dead owner."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("tensorcom")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "tensorcom.cli.main"]
    driver = popen.start([*command, "serve", "--ray", "2", "--address", ray.get_runtime_context().gcs_address,
                          FACTORY, f"zsplit://127.0.0.1:{free_port()}", "--epochs", "1", "-r", "1"],
                         stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    for line in driver.stderr:
        if line.startswith("consumers join"):
            pids = [int(pid) for pid in re.findall(r"pid (\d+)", line)]
            break
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    driver.kill()
    driver.wait(timeout=10)
    assert wait_gone(pids) == []


def test_an_actor_pushes_to_a_trainer_that_binds_and_serve_names_its_url(ray_instance, free_port, capsys):
    """A connecting URL: the actor pushes to a trainer that binds (zpull), which gets the epoch whole;
    serve() prints that URL as where consumers connect."""
    from tensorcom import Connection
    from tensorcom.adapters import ray as tray

    port, ids = free_port(), []
    with Connection(f"zpull://127.0.0.1:{port}", timeout=60) as conn:
        consumer = threading.Thread(target=lambda: ids.extend(int(i) for batch in conn for i in batch["id"]))
        consumer.start()
        result = tray.serve(f"{os.path.abspath(__file__)}:make_shuffled", f"zpush://127.0.0.1:{port}", workers=1)
        consumer.join(timeout=30)
    assert sorted(ids) == list(range(48)) and result["batches"] == 12
    assert f"consumers join zpush://127.0.0.1:{port}; 1 Ray actor(s)" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray Data's own
def test_a_ray_dataset_reaches_a_plain_consumer(ray_instance, free_port):
    from tensorcom.adapters import ray as tray

    pytest.importorskip("ray.data", reason="Ray Data needs ray[data] (pandas, pyarrow)")
    port = free_port()
    ids: list[int] = []
    dataset = ray.data.range(100, override_num_blocks=1).map_batches(lambda b: {"id": b["id"] * 2})  # one task
    consumer = threading.Thread(target=consume, args=(f"zjoin://127.0.0.1:{port}", ids))
    consumer.start()
    result = tray.serve_dataset(dataset, f"zshare://127.0.0.1:{port}", workers=1, batch_size=16, host="127.0.0.1",
                                report=None)
    consumer.join(timeout=30)
    assert sorted(ids) == [2 * i for i in range(100)] and result["samples"] == 100


def test_an_actor_whose_pipeline_raises_ends_the_serve_with_worker_error(ray_instance, free_port):
    """A bug in the augmentation: serve() raises WorkerError naming the actor and the pipeline's own
    error, and no actor is left behind."""
    from tensorcom.adapters import ray as tray
    from tensorcom.errors import WorkerError

    pids: list[int] = []
    with pytest.raises(WorkerError, match=r"(?s)serving actor 0 \(pid \d+ on .*bad sample 9"):
        with tray.start(f"{os.path.abspath(__file__)}:make_broken", f"zsplit://127.0.0.1:{free_port()}", workers=1,
                        host="127.0.0.1", report=None) as serving:
            pids = [m.pid for m in serving.members]
            serving.wait(timeout=60)
    assert len(pids) == 1 and wait_gone(pids) == []


@pytest.mark.parametrize("address,url", [
    ("tcp://0.0.0.0:7880", "zjoin://10.0.0.5:7880"),  # a wildcard bind: the driver's node address
    ("tcp://127.0.0.1:7880", "zjoin://127.0.0.1:7880"),
    ("ipc:///tmp/feed", "zjoin+ipc:///tmp/feed"),
])
def test_join_url_names_the_drivers_node_for_a_wildcard_bind(address, url):
    from tensorcom.adapters.ray._driver import join_url

    assert join_url(address, "10.0.0.5") == url


def test_actor_options_split_ray_resources_from_custom_ones():
    from tensorcom.adapters.ray import actor_options

    options = actor_options(0, {"num_gpus": 1, "memory": 2**30, "accel": 2}, None, 3)
    assert options == {"num_cpus": 1, "num_gpus": 1, "memory": 2**30, "resources": {"accel": 2},
                       "scheduling_strategy": "SPREAD", "max_restarts": 3, "max_task_retries": 0}


def test_handover_drops_the_dead_senders_late_batches_and_counts_the_rest(free_port):
    """The sharing server's side of a restart, without Ray: sender A sends ids 0..2 of share 0 and is
    handed over; its late ids 3..4 are dropped; the plan says 3 are taken; sender B (the restarted
    worker) passes over 3 and sends 3..5 and the end: the consumer gets 0..5 once, in one pass."""
    from tensorcom import Connection
    from tensorcom.transport.sharing.hub import Hub

    def batch(i: int) -> dict:
        return {"id": np.array([i], dtype=np.int32)}

    hub = Hub(f"zsplit://127.0.0.1:{free_port()}", input_host="127.0.0.1")
    portion = ("stream-x", 0, 1)
    try:
        with Connection(hub.addresses[0].replace("tcp", "zjoin"), credit=8, timeout=20) as consumer:
            first = Connection(hub.worker_url, group="stream-x", portion=portion)
            for i in range(3):
                first.send(batch(i))
            deadline = time.monotonic() + 10
            while hub.server.received.get(("stream-x", 0, 0), 0) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            plan = hub.server.handover("stream-x", 0, 1, retire=[first.sender])
            assert (plan.epoch, plan.skip(0, 0)) == (0, 3)
            for i in (3, 4):
                first.send(batch(i))  # late: dropped
            first.close(linger=5)
            second = Connection(hub.worker_url, group="stream-x", portion=portion)
            for i in range(6)[plan.skip(0, 0):]:
                second.send(batch(i))
            second.end_epoch()
            ids = [int(b["id"][0]) for b in consumer]
            second.close(linger=5)
        assert sorted(ids) == list(range(6))
        assert hub.server.input_epoch == 1
    finally:
        hub.abort()


def make_shuffled():
    """48 ids shuffled per epoch (seed 1), batches of 4: each portion's order is the pipeline's."""
    from tensorcom.pipeline import Pipeline

    return Pipeline(list(range(48)), seed=1).shuffle(8).map(lambda i: {"id": np.int64(i)}).batch(4)


class UpThenDown:
    """A scaler that says +1 at its first observation (the driver makes it during epoch 0), then -1 at
    the first observation of two actors whose runs reported waiting (an idle share above 0), and
    sets `down` then."""

    def __init__(self):
        self.seen, self.targets, self.down = [], [], threading.Event()

    def observe(self, now, data_wait, idle_share, workers, idle_cores):
        self.seen.append((workers, idle_share))
        if len(self.seen) == 1:
            return 1
        return -1 if workers == 2 and idle_share > 0 and not self.down.is_set() else 0

    def decided(self, target):
        self.targets.append(target)
        if target == 1:
            self.down.set()


def test_auto_actors_grow_and_shrink_at_epoch_boundaries_without_loss_or_reorder(ray_instance, free_port):
    """workers="auto", min 1, max 2 (V = 2): one actor serves epoch 0, the scaler asks for two, two
    serve epoch 1, their runs report their idle share, the scaler asks for one (the consumer holds
    epoch 2 back until then: with a replay buffer of 2 the actors cannot end it), one serves epoch
    3; portions re-dealt v % N == i; the consumer gets each epoch once, each portion in its order
    (batches depend on seed, epoch and V only)."""
    from tensorcom import Connection
    from tensorcom.adapters import ray as tray

    scaler, url = UpThenDown(), f"zshare://127.0.0.1:{free_port()}"
    epochs: list[list[tuple]] = [[], [], [], []]
    with tray.start(f"{os.path.abspath(__file__)}:make_shuffled", url, workers="auto", min_workers=1, max_workers=2,
                    scaler=scaler, epochs=4, host="127.0.0.1", report=None, sharing={"replay": 2}) as serving:
        assert len(serving.members) == 1
        with Connection(serving.urls[0], credit=2, timeout=60) as conn:
            for epoch, got in enumerate(epochs):
                for batch in conn:
                    got.append(tuple(int(i) for i in batch["id"]))
                    if epoch == 2:
                        assert scaler.down.wait(timeout=30), f"no -1 from {scaler.seen}"
        result = serving.wait(timeout=60)
        pids = [m.pid for m in serving.members]
    assert scaler.seen[0][0] == 1 and scaler.targets == [2, 1] and result["workers"] == 1 and len(pids) == 1
    for epoch, got in enumerate(epochs):
        orders = []
        for v in range(2):
            portion = make_shuffled().shard(v, 2)
            portion.set_epoch(epoch)
            orders.append([tuple(int(i) for i in batch["id"]) for batch in portion])
        assert sorted(got) == sorted(b for order in orders for b in order), f"epoch {epoch}: each batch once"
        for order in orders:
            assert [b for b in got if b in order] == order, f"epoch {epoch}: each portion in its order"
    assert wait_gone(pids) == []


def test_auto_actors_are_removed_when_their_runs_wait_on_the_consumers():
    """ActorScaling feeds the local processes' Autoscaler the actors' idle share from their finished
    runs: consumers waiting and idle CPUs add an actor; until a run of the new number of actors has
    reported, none is removed (a run of another number does not count); runs waiting on the hub
    most of their time while the consumers do not wait remove one."""
    from tensorcom.adapters.ray._scaling import ActorScaling
    from tensorcom.pipeline.autoscale import Autoscaler

    now = [0.0]
    scaling = ActorScaling(Autoscaler(1, 3, cores=3, window=2.0, cooldown=0.0), 1, 3, clock=lambda: now[0])

    def observe_for(seconds: int, data_wait: float, actors: int) -> bool:
        changed = False
        for _ in range(seconds + 1):
            if scaling.due(actors):  # as the driver: not while a change waits for the boundary
                changed |= scaling.observe(data_wait, actors, 2.0)
            now[0] += 1.0
        return changed

    assert observe_for(2, 0.5, 1) and scaling.target == 2
    scaling.ran(0.9, 0.1, actors=1)  # the one actor's run, before the change took effect
    assert scaling.idle_share() == 0.0 and not observe_for(3, 0.0, 2) and scaling.target == 2
    scaling.ran(0.6, 0.4, actors=2)
    scaling.ran(0.8, 0.2, actors=2)
    assert scaling.idle_share() == pytest.approx(0.7)
    assert observe_for(3, 0.0, 2) and scaling.target == 1


IMAGES = 16  # the cache test's images: 16 PNGs of 8x10, keys "00".."15"
OUTCOMES = ("none", "stored", "hit", "full")  # a sample's "__cache__" as a number ("none": no cache stage)


def image_samples() -> list[dict]:
    """The images as samples ({"__key__", "png": bytes}), the same bytes in every process."""
    import io

    from PIL import Image

    samples = []
    for i in range(IMAGES):
        pixels = (np.arange(8 * 10 * 3, dtype=np.uint8).reshape(8, 10, 3) * (i + 1)).astype(np.uint8)
        stream = io.BytesIO()
        Image.fromarray(pixels).save(stream, format="PNG")
        samples.append({"__key__": f"{i:02d}", "png": stream.getvalue()})
    return samples


def random_crop(sample: dict, rng) -> dict:
    """A 6x6 crop at a random place of the decoded image, with the sample's id and cache outcome."""
    y, x = rng.integers(0, 3), rng.integers(0, 5)
    return {"id": np.int64(sample["__key__"]), "image": np.ascontiguousarray(sample["png"][y:y + 6, x:x + 6]),
            "outcome": np.int8(OUTCOMES.index(sample.get("__cache__", "none")))}


def decode_png(sample: dict) -> dict:
    from tensorcom.images import decode

    return {**sample, "png": decode(sample["png"])}


def make_cached():
    """The images decoded through the server's cache (cache(None)), then cropped at random."""
    from tensorcom.pipeline import Pipeline

    return Pipeline(image_samples(), seed=5).cache(None, key="ray-test-images-1").map(random_crop, rng=True).batch(4)


def make_decoded():
    """make_cached without the cache: decoded every time (the crop is the same stage, the same draws)."""
    from tensorcom.pipeline import Pipeline

    return Pipeline(image_samples(), seed=5).map(decode_png).map(random_crop, rng=True).batch(4)


def test_actors_decode_into_a_cache_of_their_node_and_serve_the_same_bits(ray_instance, free_port, tmp_path):
    """Issue 20: serve(cache=DIR) gives every actor DIR on its node (made there: it does not exist
    yet); two actors store every image once in epoch 0, epoch 1 maps them all from the files, and
    both epochs are exact and the same bits as the pipeline without a cache."""
    from tensorcom import Connection
    from tensorcom.adapters import ray as tray

    cache, url = tmp_path / "node-cache", f"zsplit://127.0.0.1:{free_port()}"
    epochs: list[list[dict]] = [[], []]
    with tray.start(f"{os.path.abspath(__file__)}:make_cached", url, workers=2, epochs=2, host="127.0.0.1",
                    report=None, cache=cache) as serving:
        with Connection(serving.urls[0], credit=2, timeout=60) as conn:
            for got in epochs:
                got.extend({name: np.array(value) for name, value in batch.items()} for batch in conn)
        serving.wait(timeout=60)
    for epoch, got in enumerate(epochs):
        assert sorted(int(i) for batch in got for i in batch["id"]) == list(range(IMAGES)), f"epoch {epoch}"
        outcomes = {OUTCOMES[o] for batch in got for o in batch["outcome"]}
        assert outcomes == {"stored" if epoch == 0 else "hit"}, f"epoch {epoch}: {outcomes}"
        expected = {}
        for v in range(2):
            portion = make_decoded().shard(v, 2)
            portion.set_epoch(epoch)
            expected.update({tuple(batch["id"].tolist()): batch["image"] for batch in portion})
        for batch in got:
            assert np.array_equal(batch["image"], expected[tuple(batch["id"].tolist())]), f"epoch {epoch}"
    assert any(path.is_file() for path in cache.rglob("*"))


@pytest.mark.parametrize("options, message", [
    ({"min_workers": 0}, "min_workers"),
    ({"min_workers": 3, "max_workers": 2}, "above max_workers"),
    ({"min_workers": 2, "max_workers": 2, "portions": 1}, "portions"),
    ({"url": "zpush://127.0.0.1:9"}, "sharing URL .*, not 'zpush://127.0.0.1:9'"),
    ({"workers": 2, "max_workers": 4}, "workers='auto'"),
    ({"workers": 2, "url": "zpush://127.0.0.1:9", "min_consumers": 2}, "min_consumers=2 .*zpush://127.0.0.1:9"),
])
def test_bad_options_are_a_clear_error_before_ray_starts(options, message):
    from tensorcom.adapters import ray as tray

    options = {"workers": "auto", "url": "zsplit://127.0.0.1:9", **options}
    with pytest.raises(ValueError, match=message):
        tray.start(FACTORY, options.pop("url"), report=None, **options)


def test_auto_decides_only_what_needs_rays_cpus_and_keeps_the_streams_plan(ray_instance):
    """start_feeds makes the stream's plan once, before Ray starts; auto_actors then decides only what
    needs Ray's CPUs (2 here): an UNDECIDED V becomes max_workers' default (CPUs / CPUs per actor),
    the rest of the plan kept; a decided plan passes as it is; min_workers that do not fit are a
    ValueError."""
    from tensorcom.adapters.ray import auto_actors
    from tensorcom.adapters.ray._scaling import UNDECIDED
    from tensorcom.pipeline.serving import resume_plan
    from tensorcom.transport.resume import ResumePlan

    fresh = resume_plan(None, UNDECIDED, 3, 2)
    auto, decided = auto_actors(ray_instance, (1, None, None), None, fresh)
    assert (decided.stream, decided.portions, decided.epoch) == (fresh.stream, 2, 3)
    assert (auto.minimum, auto.ceiling, auto.target) == (1, 2, 1)
    resumed = ResumePlan("s", 5, 1, {(1, 0): 3})
    auto, kept = auto_actors(ray_instance, (1, None, None), {"num_cpus": 0.5}, resumed)
    assert kept is resumed and auto.ceiling == 4
    with pytest.raises(ValueError, match="min_workers=3 actors do not fit: the stream has 2 portions"):
        auto_actors(ray_instance, (3, None, None), {"num_cpus": 0}, ResumePlan("s", 2, 0))


def test_auto_actors_are_bounded_by_rays_cpus():
    from tensorcom.adapters.ray._scaling import actor_ceiling

    assert actor_ceiling(1, 8, 6, cpus=4.0, per_actor=2.0) == 2  # 4 CPUs, 2 per actor
    assert actor_ceiling(1, 8, 6, cpus=4.0, per_actor=0.0) == 6  # actors without CPUs: V bounds them
    with pytest.raises(ValueError, match="do not fit"):
        actor_ceiling(3, 8, 6, cpus=4.0, per_actor=2.0)


def test_missing_ray_names_the_extra(monkeypatch):
    import sys

    from tensorcom.adapters import ray as tray
    from tensorcom.errors import MissingDependency

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependency, match=r"tensorcom\[ray\]") as info:
        tray.serve(FACTORY, "zsplit://127.0.0.1:7880")
    assert info.value.extra == "ray"


def test_tensorcom_ray_exports_only_its_api():
    """Issue 17: tensorcom.ray.__all__ is what docs/ray.md documents, not the driver's internals."""
    import tensorcom

    assert tensorcom.ray.__all__ == ["Serving", "endpoints", "serve", "serve_dataset", "start"]
    assert all(callable(getattr(tensorcom.ray, name)) for name in tensorcom.ray.__all__)


def test_an_actor_that_died_after_the_hub_ended_its_epoch_serves_nothing_again():
    """The driver can still be waiting on epoch e when the hub's input has ended it (a lagging
    consumer, the hub ahead): an actor killed then must not serve e again (a whole portion twice)."""
    from tensorcom.adapters.ray._driver import served_again
    from tensorcom.transport.index_set import IndexSet
    from tensorcom.transport.resume import ResumePlan

    before = ResumePlan("s", 2, 0, {(3, 1): IndexSet([[0, 1]])})
    assert served_again(3, {1: ResumePlan("s", 2, 4)}, before) is None
    again = served_again(3, {1: ResumePlan("s", 2, 3, {(3, 1): 2})}, before)
    assert (again.stream, again.portions, again.epoch) == ("s", 2, 3)
    assert again.taken(3, 1) == IndexSet([[0, 3]])  # what the consumers had, then the hub's 2 next
