"""The demo's classifier: both backends learn a tiny separable image problem and reject bad input."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from tensorcom.demo.backends import make_trainer, torch_available
from tensorcom.demo.trainer import NumpyTrainer, pooled_features


@pytest.fixture
def keep_torch_threads():
    """TorchTrainer sets torch's process-wide thread count; put it back for the other tests. (Not autouse:
    the tests that make no torch trainer, the isolated JAX one above all, need not import torch.)"""
    if not torch_available():
        yield
        return
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


COLOURS = np.array([[220, 40, 40], [40, 200, 40], [40, 40, 220]], np.uint8)


def blobs(n: int, seed: int, size: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """n noisy grey images, each with a square of its class's colour at a random place and size."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(COLOURS), n)
    images = rng.integers(90, 160, (n, size, size, 3)).astype(np.uint8)
    for image, label in zip(images, labels):
        side = rng.integers(5, 12)
        y, x = rng.integers(0, size - side, 2)
        image[y : y + side, x : x + side] = COLOURS[label]
    return images, labels.astype(np.int32)


def train(trainer, steps: int = 60) -> float:
    """Train on fresh batches, return accuracy on a held-out set."""
    for i in range(steps):
        trainer.step(*blobs(32, seed=i))
    return trainer.accuracy(*blobs(300, seed=10_000))


def test_numpy_trainer_learns():
    trainer = make_trainer(3, backend="numpy", seed=1)
    assert trainer.backend == "numpy"
    first = trainer.step(*blobs(32, seed=99))
    assert train(trainer) >= 0.95
    assert trainer.step(*blobs(32, seed=98)) < first


@pytest.mark.skipif(not torch_available(), reason="torch not installed")
def test_torch_trainer_learns(keep_torch_threads):
    trainer = make_trainer(3, backend="torch", seed=1)
    assert trainer.backend == "torch"
    assert train(trainer) >= 0.95
    predictions = trainer.predict(blobs(5, seed=3)[0])
    assert predictions.shape == (5,) and predictions.dtype == np.int64


def test_auto_backend_matches_availability(keep_torch_threads):
    assert make_trainer(4).backend == ("torch" if torch_available() else "numpy")


def test_numpy_is_deterministic_per_seed():
    a, b = make_trainer(3, backend="numpy", seed=5), make_trainer(3, backend="numpy", seed=5)
    batch = blobs(16, seed=0)
    assert a.step(*batch) == b.step(*batch)
    assert np.array_equal(a.predict(batch[0]), b.predict(batch[0]))


def test_features_have_fixed_width_for_any_size():
    small = pooled_features(np.zeros((2, 24, 24, 3), np.float32))
    large = pooled_features(np.zeros((2, 64, 48, 3), np.float32))
    assert small.shape == large.shape == (2, 8 * 8 * 3 + 6 + 64)


@pytest.mark.parametrize(
    "kwargs",
    [{"classes": 1}, {"classes": "3"}, {"classes": 3, "backend": "tensorflow"}],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        make_trainer(**kwargs)


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax not installed")
@pytest.mark.isolated  # JAX never starts in the test process (tests/conftest.py)
def test_jax_trainer_pads_the_short_batch_and_predicts():
    """One compiled shape: the last, shorter batch is padded (weight 0), so its loss is its own."""
    import functools

    from tensorcom.demo.jax_trainer import forward

    trainer = make_trainer(3, backend="jax", seed=1)
    jax = trainer.jax
    images, labels = blobs(32, seed=0)
    trainer.step(images, labels)
    compiled = jax.jit(functools.partial(forward, jax))  # one compilation, not one per operation
    logits = np.asarray(compiled(trainer.params, jax.numpy.asarray(images[:5])), np.float64)
    log_p = logits - logits.max(axis=1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(axis=1, keepdims=True))
    loss = trainer.step(images[:5], labels[:5])  # padded to 32 rows, 27 of them of weight 0
    assert trainer.backend == "jax" and np.isfinite(loss)
    assert loss == pytest.approx(-log_p[np.arange(5), labels[:5]].mean(), rel=1e-3)  # the 5 rows' own loss
    predictions = trainer.predict(blobs(300, seed=3)[0])
    assert predictions.shape == (300,) and predictions.dtype == np.int64
    with pytest.raises(ValueError, match="predict"):
        make_trainer(3, backend="jax").predict(images)


def test_bad_batches():
    trainer = NumpyTrainer(3)
    with pytest.raises(ValueError, match="predict"):
        trainer.predict(np.zeros((1, 8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match=r"\(N, H, W, C\)"):
        trainer.step(np.zeros((4, 8, 8), np.uint8), np.zeros(4, np.int32))
    with pytest.raises(ValueError, match="labels"):
        trainer.step(np.zeros((4, 8, 8, 3), np.uint8), np.zeros(3, np.int32))
    with pytest.raises(ValueError, match="labels"):
        trainer.step(np.zeros((4, 8, 8, 3), np.uint8), np.zeros(4, np.float32))
