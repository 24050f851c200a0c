"""transport/batches.py: the one batch_size (rows, not fields) and the batch-converter hook."""

import numpy as np
import pytest

from tensorcom.transport import batches
from tensorcom.transport.batches import batch_size, resolve_converters, transform_with
from tensorcom.transport.connection import Connection


def image_label_batch(n=64):
    """What serve-imagenet-dir sends: [images uint8 (n, H, W, 3), labels int32 (n,)]."""
    return [np.zeros((n, 8, 8, 3), np.uint8), np.arange(n, dtype=np.int32)]


def test_list_batch_counts_rows_not_fields():
    assert batch_size(image_label_batch(64)) == 64
    assert batch_size(tuple(image_label_batch(5))) == 5


def test_dict_batch_counts_rows_and_consults_dunder_fields_last():
    assert batch_size({"__key__": ["a", "b", "c"], "x": np.zeros((2, 5))}) == 2
    assert batch_size({"__key__": ["a", "b", "c"], "n": 7}) == 3
    assert batch_size({"jpg": [b"a", b"b"], "cls": np.arange(2)}) == 2


def test_plain_values_are_skipped_then_count_one():
    assert batch_size(["name", np.float32(1.5), np.zeros((4, 2))]) == 4  # first field with rows decides
    assert batch_size([3, "x", b"y", np.array(2.0)]) == 1
    assert batch_size({"n": 3}) == 1


def test_bare_arrays_count_their_leading_dimension():
    assert batch_size(np.zeros((64, 224, 224, 3))) == 64
    assert batch_size(np.array(5)) == 1


def test_empty_and_mismatched_batches():
    assert batch_size([]) == 0 and batch_size({}) == 0 and batch_size(()) == 0
    assert batch_size([np.zeros((64, 3)), np.zeros(32)]) == 64  # the first field decides, unchecked


def test_non_batches_are_a_type_error_naming_the_type():
    with pytest.raises(TypeError, match="int"):
        batch_size(3)
    with pytest.raises(TypeError, match="str"):
        batch_size("abc")


def test_torch_tensors_count_rows():
    torch = pytest.importorskip("torch")
    assert batch_size([torch.zeros(16, 3, 8, 8), torch.zeros(16)]) == 16
    assert batch_size(torch.zeros(16, 2)) == 16


def test_every_caller_uses_the_one_implementation():
    from tensorcom import zcom
    from tensorcom.pipeline import serving, stages

    assert stages.batch_size is batches.batch_size
    assert serving.batch_size is batches.batch_size
    assert zcom.batch_size is batches.batch_size


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
        stats = serve(pipeline, f"zpush://127.0.0.1:{port}", workers=1, report=None)
        received = list(receiver)
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
