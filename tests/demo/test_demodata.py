"""tensorcom.demo.data: the cached coloured-shapes dataset (ImageFolder tree + tar shards)."""

from __future__ import annotations

import tarfile

import numpy as np
import pytest

from tensorcom import images
from tensorcom.demo import data as demodata
from tensorcom.images import ImageFolder

SMALL = dict(classes=10, per_class_train=6, per_class_test=3, size=32)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return demodata.make_demo_dataset(tmp_path_factory.mktemp("demo") / "ds", **SMALL)


def shard_members(paths) -> dict[str, bytes]:
    out = {}
    for path in paths:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                out[member.name] = tar.extractfile(member).read()
    return out


def test_tree_and_shards(small):
    train, test = ImageFolder(small.train_dir), ImageFolder(small.test_dir)
    assert train.classes == test.classes == small.classes == demodata.class_names(10)
    assert len(train) == 60 and len(test) == 30
    assert images.decode(train.read(0)[0]).shape == (32, 32, 3)
    members = shard_members(small.shards)
    assert len(members) == 2 * 60 and len(shard_members(small.test_shards)) == 2 * 30
    labels = sorted(int(v) for k, v in members.items() if k.endswith(".cls"))
    assert labels == sorted(label for _, label in train.samples)
    assert (small.root / demodata.MARKER).exists()
    assert small.shard_pattern.startswith(str(small.root / "shards" / "train-"))


def test_shard_labels_match_images(small):
    members = shard_members(small.shards)
    folder = ImageFolder(small.train_dir)
    by_bytes = {folder.read(i)[0]: label for i, (_, label) in enumerate(folder.samples)}
    for name, data in members.items():
        if name.endswith(".jpg"):
            assert by_bytes[data] == int(members[name[:-4] + ".cls"])


def test_cached_and_remade(tmp_path):
    root = tmp_path / "ds"
    first = demodata.make_demo_dataset(root, **SMALL)
    stamp = (root / demodata.MARKER).stat().st_mtime_ns
    again = demodata.make_demo_dataset(root, **SMALL)
    assert again == first and (root / demodata.MARKER).stat().st_mtime_ns == stamp
    (root / demodata.MARKER).unlink()  # a half-made tree is made again
    demodata.make_demo_dataset(root, **SMALL)
    assert (root / demodata.MARKER).exists() and len(ImageFolder(root / "train")) == 60
    other = demodata.make_demo_dataset(root, **(SMALL | {"per_class_train": 2}))
    assert len(ImageFolder(other.train_dir)) == 20  # other arguments: made again
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dir left


def test_default_root_under_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORCOM_CACHE", str(tmp_path / "cache"))
    made = demodata.make_demo_dataset(classes=3, per_class_train=2, per_class_test=1, size=16)
    assert made.root.parent == tmp_path / "cache" / "demo"
    assert len(made.classes) == 3 and len(ImageFolder(made.test_dir)) == 3


def test_refuses_foreign_directory(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match="mine.txt"):
        demodata.make_demo_dataset(tmp_path, **SMALL)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_deterministic(tmp_path):
    a = demodata.make_demo_dataset(tmp_path / "a", **SMALL)
    b = demodata.make_demo_dataset(tmp_path / "b", **SMALL)
    fa, fb = ImageFolder(a.train_dir), ImageFolder(b.train_dir)
    assert all(fa.read(i) == fb.read(i) for i in range(len(fa)))


def test_bad_arguments(tmp_path):
    for bad in (dict(classes=0), dict(classes=11), dict(size=8), dict(per_class_train=0)):
        with pytest.raises(ValueError):
            demodata.make_demo_dataset(tmp_path / "x", **bad)


def test_classes_easy_to_tell_apart():
    """A linear softmax classifier on 8x8 pooled colours reaches >= 90% on held-out images."""
    rng = np.random.default_rng(0)

    def data(n: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.repeat(np.arange(10), n)
        imgs = np.stack([images.decode(demodata.render(k, 32, rng)) for k in labels])
        return imgs.reshape(len(imgs), 8, 4, 8, 4, 3).mean((2, 4)).reshape(len(imgs), -1) / 255, labels

    (x, y), (x_test, y_test) = data(50), data(10)
    weights, bias, onehot = np.zeros((x.shape[1], 10)), np.zeros(10), np.eye(10)[y]
    for _ in range(300):
        z = x @ weights + bias
        p = np.exp(z - z.max(1, keepdims=True))
        grad = (p / p.sum(1, keepdims=True) - onehot) / len(x)
        weights -= 2.0 * x.T @ grad
        bias -= 2.0 * grad.sum(0)
    assert ((x_test @ weights + bias).argmax(1) == y_test).mean() >= 0.9


@pytest.mark.procs
def test_concurrent_makers_agree(tmp_path, processes):
    """Two processes making the same dataset at once: both end with one complete, intact tree."""
    target = tmp_path / "shared"
    procs = [processes.start(_make, str(target)) for _ in range(2)]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    folder = ImageFolder(target / "train")
    assert len(folder) == 60 and all(images.decode(folder.read(i)[0]).shape == (32, 32, 3)
                                     for i in range(0, 60, 7))
    assert [p.name for p in tmp_path.iterdir()] == ["shared"]


def _make(root: str) -> None:
    demodata.make_demo_dataset(root, **SMALL)
