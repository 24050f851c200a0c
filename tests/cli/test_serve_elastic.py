"""Elastic restart: a server SIGKILLed mid-epoch and resumed (`--resume`) with another number of
processes (`tensorcom serve -w`, `serve-imagenet-dir -P` and `-w`) sends exactly the rest of the epoch, each
portion in its uninterrupted order, with the same random draws per sample."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorcom import Connection
from tensorcom.pipeline import Pipeline

pytestmark = [pytest.mark.net, pytest.mark.procs]

SAMPLES, BATCH, PORTIONS = 36, 3, 3


def keyed(i):
    return {"__key__": f"s{i:03d}"}


def draw(sample, rng):
    """A per-sample random draw, as an augmentation makes one."""
    return {**sample, "draw": np.int64(rng.integers(1 << 40))}


def elastic_pipeline():
    """The factory served: shuffled keys, a random draw each, in batches of BATCH."""
    return Pipeline(range(SAMPLES), seed=5).shuffle(8).map(keyed).map(draw, rng=True).batch(BATCH)


def reference(make, portions: int) -> list[list]:
    """Each portion's samples (key, draw) in its uninterrupted order of epoch 0."""
    return [[(key, int(d)) for batch in make().shard(v, portions) for key, d in zip(batch["__key__"], batch["draw"])]
            for v in range(portions)]


def serve_command(port: int, workers: int, *more: str) -> list[str]:
    return [sys.executable, "-m", "tensorcom.cli.main", "serve", f"{__file__}:elastic_pipeline",
            f"zpush://127.0.0.1:{port}", "-w", str(workers), "--epochs", "1", "-r", "0", *more]


def take_and_kill(popen, port: int, command: list[str], state: Path, count: int | None) -> list:
    """Start `command` (a server sending to zpull://127.0.0.1:port), continue the consumer record in
    `state` (when it exists), take `count` batches (None: the rest of the epoch), save the record; a
    server still running is SIGKILLed (its main process; its workers follow it). Returns the batches taken."""
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30, rcvhwm=1) as conn:
        if state.exists():
            conn.load_state_dict(json.loads(state.read_text()))
        server = popen.start(command)
        batches = list(conn) if count is None else [conn.recv() for _ in range(count)]
        conn.save_state(state)
        if count is None:
            assert server.wait(timeout=30) == 0
        else:  # the server's process alone, as the OOM killer does: its workers see it go and leave
            os.kill(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
    return batches


def check_one_epoch(taken: list, expected: list[list]) -> None:
    """`taken` (samples (key, draw) in arrival order, over every run) is the epoch once, every portion
    in its uninterrupted order, each sample with its uninterrupted draw."""
    assert sorted(taken) == sorted(sample for portion in expected for sample in portion)
    for portion in expected:
        keys = {key for key, _ in portion}
        assert [sample for sample in taken if sample[0] in keys] == portion


def test_three_restarts_with_another_worker_count_each_deliver_the_epoch_once(popen, tmp_path, free_port):
    """-w 1 (3 portions) → -w 3 → -w 2 → -w 1: three SIGKILLs mid-epoch, three resumes."""
    state, taken = tmp_path / "state.json", []
    runs = [(1, 2, ("--portions", str(PORTIONS))), (3, 3, ()), (2, 2, ()), (1, None, ())]
    for workers, count, more in runs:
        resume = ("--resume", str(state)) if state.exists() else ()
        port = free_port()
        batches = take_and_kill(popen, port, serve_command(port, workers, *more, *resume), state, count)
        taken += [(key, int(d)) for batch in batches for key, d in zip(batch["__key__"], batch["draw"])]
        (stream,) = json.loads(state.read_text())["streams"].values()
        assert stream["workers"] == PORTIONS
    assert stream["epoch"] == 1 and stream["shares"] == []  # the epoch is complete
    check_one_epoch(taken, reference(elastic_pipeline, PORTIONS))


def test_resume_refuses_another_number_of_portions(tmp_path):
    from tensorcom.pipeline.serving import serve

    state = {"version": 2, "streams": {"serve-x": {"workers": 2, "epoch": 0, "shares": []}}}
    with pytest.raises(ValueError, match="has 2 portions"):
        serve(elastic_pipeline, "zpush://127.0.0.1:7000", resume=state, portions=3)


# --- serve-imagenet-dir -P 2 -w 0 → -P 1 -w 2 -------------------------------------------------------

IMAGES = 16


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """DIR/<class>/*.png: IMAGES images in 2 classes, image i of red value 10 + 10 i (its id: a crop
    keeps it) over a green ramp (so a crop's place and size show in its pixels)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("elastic-imagenet")
    ramp = np.linspace(0, 250, 24, dtype=np.uint8)
    for i in range(IMAGES):
        folder = root / f"class{i % 2}"
        folder.mkdir(exist_ok=True)
        pixels = np.zeros((20, 24, 3), np.uint8)
        pixels[..., 0], pixels[..., 1], pixels[..., 2] = 10 + 10 * i, ramp, 90
        Image.fromarray(pixels).save(folder / f"{i:02d}.png")
    return root


def image_ids(batches: list) -> list[int]:
    return [int(image[0, 0, 0]) for images, _ in batches for image in images]


def reference_batches(pipeline, portions: int) -> list[list]:
    """Each portion's batches of epoch 0, resized as the servers resize images this small: with Pillow
    (images.imagenet.Augment)."""
    from torchless import pillow_resize  # here: the servers above load this module without tests/ on their path

    with pillow_resize():
        return [list(pipeline.shard(v, portions)) for v in range(portions)]


def test_imagenet_server_resumed_with_fewer_publishers_and_more_workers(tree, popen, tmp_path, free_port):
    """-P 2 (inline augmentation) killed after 2 batches, resumed with -P 1 -w 2 (two augmenting
    processes): the epoch once, each batch the uninterrupted one to the pixel (same images, same crops)."""
    from tensorcom.images.imagenet import dir_pipeline

    pytest.importorskip("PIL")
    state, taken = tmp_path / "state.json", []
    for parallel, workers, count in ((2, 0, 2), (1, 2, None)):
        port = free_port()
        command = [sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", "-d", str(tree), "-b", "2",
                   "--size", "8", "--seed", "3", "-P", str(parallel), "-w", str(workers), "--epochs", "1",
                   "-r", "0", f"zpush://127.0.0.1:{port}", *(("--resume", str(state)) if state.exists() else ())]
        taken += take_and_kill(popen, port, command, state, count)
    expected = reference_batches(dir_pipeline(str(tree), batch_size=2, size=8, seed=3), 2)
    by_ids = {tuple(image_ids([batch])): batch[0] for portion in expected for batch in portion}
    assert sorted(image_ids(taken)) == sorted(10 + 10 * i for i in range(IMAGES))
    for portion in expected:
        ids = set(image_ids(portion))
        assert [i for i in image_ids(taken) if i in ids] == image_ids(portion)
    for images, _ in taken:
        np.testing.assert_array_equal(images, by_ids[tuple(image_ids([(images, None)]))])
