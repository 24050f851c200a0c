"""tensorcom.images.imagenet: the ImageNet training pipelines the servers serve, their pieces, and
the benchmark pipeline, run in-process on a small ImageFolder tree."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensorcom.images.imagenet import (
    benchmark_pipeline,
    collate_pair,
    dataset_root,
    dir_pipeline,
    image_bytes,
    label_of,
)

CLASSES, PER_CLASS = 2, 3


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """DIR/train/<class>/*.jpg, CLASSES classes of PER_CLASS images."""
    import simplejpeg

    root = tmp_path_factory.mktemp("imagenet")
    rng = np.random.default_rng(0)
    for label, i in itertools.product(range(CLASSES), range(PER_CLASS)):
        path = root / "train" / f"c{label}" / f"{i}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(simplejpeg.encode_jpeg(rng.integers(0, 255, (30, 40, 3), dtype=np.uint8)))
    return root


def test_image_bytes_and_label(tmp_path):
    assert image_bytes({"png": b"P", "jpg": b"J"}) == b"J"
    (tmp_path / "x.jpg").write_bytes(b"file")
    assert image_bytes({"__path__": str(tmp_path / "x.jpg")}) == b"file"
    with pytest.raises(KeyError, match="k1"):
        image_bytes({"__key__": "k1", "txt": b""})
    assert [label_of({"cls": v}) for v in (b"7", "8", 9)] == [7, 8, 9]
    with pytest.raises(KeyError, match="cls"):
        label_of({"__key__": "k"})


def test_collate_pair():
    images, labels = collate_pair([(np.zeros((4, 4, 3), np.uint8), np.int32(i)) for i in range(3)])
    assert images.shape == (3, 4, 4, 3) and labels.dtype == np.int32 and list(labels) == [0, 1, 2]


def test_dataset_root(tree, tmp_path):
    assert dataset_root(tree).endswith("train")
    with pytest.raises(ValueError, match="nothing"):
        dataset_root(tmp_path / "nothing")


def test_dir_pipeline_batches_in_file_order(tree):
    pipeline = dir_pipeline(dataset_root(tree), batch_size=4, size=16, shuffle=False)
    batches = list(pipeline)
    assert [len(labels) for _, labels in batches] == [4, 2]
    for images, labels in batches:
        assert images.dtype == np.uint8 and images.shape[1:] == (16, 16, 3) and labels.dtype == np.int32
    assert [int(x) for _, labels in batches for x in labels] == sorted(list(range(CLASSES)) * PER_CLASS)


def test_benchmark_pipeline_repeats_the_first_batch(tree):
    pipeline = dir_pipeline(dataset_root(tree), batch_size=4, size=8, shuffle=False, normalize=True)
    batches = list(benchmark_pipeline(pipeline))
    assert len(batches) == 2 and batches[0][0].dtype == np.float32
    assert all(np.array_equal(b[0], batches[0][0]) for b in batches)
