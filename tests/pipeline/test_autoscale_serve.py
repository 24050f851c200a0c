"""Autoscaled augmentation in the ImageNet pipelines and `serve-imagenet-dir -w auto`: the batches are
those of a fixed -w 0, batch for batch, whatever the pool's size does while it runs. The server resizes
images this small with Pillow (images.imagenet.Augment), so its batches are compared with ones resized
by Pillow here."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from torchless import pillow_resize

from tensorcom import Connection
from tensorcom.images.imagenet import dir_pipeline
from tensorcom.pipeline.autoscale import Elastic

SIZE = 16


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """An ImageFolder tree of 2 classes × 7 small PNGs."""
    from PIL import Image

    root = tmp_path_factory.mktemp("autoscale-images")
    rng = np.random.default_rng(3)
    for label in range(2):
        (root / f"c{label}").mkdir()
        for i in range(7):
            pixels = rng.integers(0, 255, (20 + i, 24, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"c{label}" / f"{i}.png")
    return root


class Flapping:
    """An Autoscaler's interface that says +1, -1, +1, ... at every observation, within 1..2."""

    minimum, ceiling = 1, 2

    def start(self) -> int:
        return 1

    def observe(self, now, data_wait, idle_share, workers, machine_idle_cores=None) -> int:
        return 1 if workers == 1 else -1


@dataclass(frozen=True)
class FlappingElastic(Elastic):
    """A test hook: an autoscaled map whose pool changes size at every result."""

    def scaler(self):
        return Flapping()


def batches_of(pipeline, epochs=2):
    out = []
    try:
        for epoch in range(epochs):
            pipeline.set_epoch(epoch)
            out.extend((images.copy(), labels.copy()) for images, labels in pipeline)
    finally:
        pipeline.close()
    return out


def assert_same(left, right):
    assert len(left) == len(right) > 0
    for (images, labels), (images2, labels2) in zip(left, right):
        assert np.array_equal(images, images2) and np.array_equal(labels, labels2)


def test_resizing_mid_epoch_changes_no_batch(folder, capfd):
    options = dict(batch_size=3, size=SIZE, seed=4)
    inline = batches_of(dir_pipeline(str(folder), workers=0, **options))
    flapping = batches_of(dir_pipeline(str(folder), workers=FlappingElastic(interval=0), **options))
    assert_same(flapping, inline)
    said = capfd.readouterr().err
    assert "map workers 2 (auto)" in said and "map workers 1 (auto)" in said


@pytest.mark.net
@pytest.mark.procs
def test_serve_imagenet_dir_auto_sends_the_batches_of_a_fixed_pool(folder, popen, free_port):
    port = free_port()
    command = [sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", "-d", str(folder), "-b", "3",
               "--size", str(SIZE), "--seed", "4", "--epochs", "1", "-r", "0", "-w", "auto", "--max-workers", "2",
               f"zpush://127.0.0.1:{port}"]
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        proc = popen.start(command, stderr=subprocess.PIPE, text=True)
        served = [(images, labels) for images, labels in conn]
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    with pillow_resize():
        expected = batches_of(dir_pipeline(str(folder), batch_size=3, size=SIZE, seed=4, workers=0), epochs=1)
    assert_same(served, expected)
