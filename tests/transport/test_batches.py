"""transport/batches.py: statistics count rows (tensorcom.batch.batch_size), not fields; the batch-converter hook."""

import concurrent.futures

import numpy as np
import pytest

from tensorcom.transport.batches import resolve_converters, transform_with
from tensorcom.transport.connection import Connection


def image_label_batch(n=64):
    """What serve-imagenet-dir sends: [images uint8 (n, H, W, 3), labels int32 (n,)]."""
    return [np.zeros((n, 8, 8, 3), np.uint8), np.arange(n, dtype=np.int32)]


def image_label_pair(i):
    return np.full((8, 8, 3), i % 256, np.uint8), np.int32(i)


def collate_pair(samples):
    """As serve-imagenet-dir collates: [images (N, 8, 8, 3), labels (N,)], a list."""
    return [np.stack([image for image, _ in samples]), np.array([label for _, label in samples], np.int32)]


@pytest.mark.net
@pytest.mark.procs
def test_serving_statistics_count_64_per_image_label_batch(free_port):
    """Defect 3: `tensorcom serve` / serve-imagenet-dir counted 2 samples (the fields) per batch of 64."""
    from tensorcom.pipeline import Pipeline
    from tensorcom.pipeline.serving import serve

    port = free_port()
    pipeline = Pipeline(range(192)).map(image_label_pair).batch(64, collate=collate_pair)
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as receiver:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # the receiver reads while the server sends
            served = pool.submit(serve, pipeline, f"zpush://127.0.0.1:{port}", workers=1, report=None)
            received = list(receiver)
            stats = served.result(timeout=60)
    assert [len(labels) for _, labels in received] == [64, 64, 64]
    assert stats["batches"] == 3 and stats["samples"] == 192
    assert receiver.count == 192


@pytest.mark.net
def test_connection_statistics_count_64_per_image_label_batch():
    with Connection("zrpull+inproc://test-batches-stats", timeout=10) as receiver, \
            Connection("zrpush+inproc://test-batches-stats", timeout=10) as sender:
        for _ in range(2):
            sender.send(image_label_batch(64))
        receiver.recv(), receiver.recv()
    assert receiver.count == 128 and receiver.batch_size == 64


class Doubler:
    """A batch converter: it sees the whole batch, keys and all."""

    def convert_batch(self, batch):
        return {key: value * 2 for key, value in batch.items()}


def test_batch_converters_get_the_whole_batch():
    converter = Doubler()
    assert resolve_converters(converter, None) is converter
    assert transform_with({"a": 1, "b": 2}, converter) == {"a": 2, "b": 4}
    assert transform_with([1, 2, 3], [lambda x: -x, None]) == [-1, 2, -3]  # 0.1's per-field rule unchanged
