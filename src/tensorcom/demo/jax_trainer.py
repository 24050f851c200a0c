"""The demo's classifier in JAX (`tensorcom demo --framework jax`): a small CNN and Adam written with
jax alone (no flax or optax), its step compiled with jax.jit. Implements
tensorcom.demo.trainer.Trainer; batches reach the device through tensorcom.adapters.jax.to_jax as
uint8 and are scaled there.
"""

from __future__ import annotations

import functools

import numpy as np

from tensorcom.demo.trainer import Trainer, checked, untrained

WIDTHS = (16, 32, 64)  # output channels of the three strided conv layers


def init_params(jax, classes: int, channels: int, seed: int) -> dict:
    """He-initialised conv kernels (HWIO) and biases, and the final linear layer (drawn with numpy,
    which needs no compilation, then put on the device)."""
    rng = np.random.default_rng(seed)
    params, cin = {}, channels
    for i, cout in enumerate(WIDTHS):
        params[f"conv{i}"] = rng.normal(0, np.sqrt(2 / (9 * cin)), (3, 3, cin, cout))
        params[f"bias{i}"] = np.zeros(cout)
        cin = cout
    params["dense"] = rng.normal(0, np.sqrt(1 / cin), (cin, classes))
    params["dense_bias"] = np.zeros(classes)
    return {name: jax.numpy.asarray(value, dtype=jax.numpy.float32) for name, value in params.items()}


def forward(jax, params: dict, images) -> object:
    """Logits (N, classes) for images (N, H, W, C) of any dtype (uint8 scaled to [-0.5, 0.5])."""
    jnp = jax.numpy
    x = images.astype(jnp.float32)
    x = x / 255 - 0.5 if images.dtype == jnp.uint8 else x - 0.5
    x = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "SAME") / 4
    for i in range(len(WIDTHS)):
        x = jax.lax.conv_general_dilated(x, params[f"conv{i}"], (2, 2), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        x = jax.nn.relu(x + params[f"bias{i}"])
        x = x / (jnp.sqrt(jnp.mean(x * x, axis=(1, 2, 3), keepdims=True)) + 1e-5)  # keeps scales steady
    return x.mean(axis=(1, 2)) @ params["dense"] + params["dense_bias"]


def make_step(jax, lr: float, beta1: float = 0.9, beta2: float = 0.999):
    """A jitted (params, moments, count, images, labels, weights) -> (params, moments, loss) Adam step;
    the loss is the weighted mean cross-entropy (weight 0: a padding row)."""

    def loss_of(params, images, labels, weights):
        logits = forward(jax, params, images)
        picked = jax.nn.log_softmax(logits)[jax.numpy.arange(labels.shape[0]), labels]
        return -(picked * weights).sum() / weights.sum()

    @jax.jit
    def step(params, moments, count, images, labels, weights):
        loss, grads = jax.value_and_grad(loss_of)(params, images, labels, weights)
        m = jax.tree_util.tree_map(lambda m, g: beta1 * m + (1 - beta1) * g, moments[0], grads)
        v = jax.tree_util.tree_map(lambda v, g: beta2 * v + (1 - beta2) * g * g, moments[1], grads)
        scale = lr * jax.numpy.sqrt(1 - beta2**count) / (1 - beta1**count)
        params = jax.tree_util.tree_map(lambda p, m, v: p - scale * m / (jax.numpy.sqrt(v) + 1e-8), params, m, v)
        return params, (m, v), loss

    return step


class JaxTrainer(Trainer):
    """The CNN above, trained with Adam on jax's default device; built on the first batch."""

    backend = "jax"

    def __init__(self, classes: int, *, seed: int = 0, lr: float | None = None):
        from tensorcom.extras import require

        super().__init__(classes, seed=seed, lr=lr)
        self.jax = require("jax")
        self.params = self.moments = None
        self.count = 0
        self._step = make_step(self.jax, self.lr)
        self._predict = self.jax.jit(functools.partial(forward, self.jax))

    def _device(self, fields: list, rows: int) -> list:
        """`fields` (images first) padded with zero rows to `rows` (one compiled shape for every batch,
        the last, shorter one too) and put on the device by tensorcom.adapters.jax.to_jax."""
        from tensorcom.adapters.jax import to_jax

        short = rows - len(fields[0])
        return to_jax([np.concatenate([f, np.zeros((short, *f.shape[1:]), f.dtype)]) if short > 0 else f
                       for f in fields])

    def step(self, images: np.ndarray, labels: np.ndarray) -> float:
        """One Adam step on the batch; returns its mean cross-entropy before the step."""
        images = checked(images, labels)  # uint8 stays uint8: scaled on the device
        if self.params is None:
            self.params = init_params(self.jax, self.classes, images.shape[-1], self.seed)
            zeros = self.jax.tree_util.tree_map(self.jax.numpy.zeros_like, self.params)
            self.moments, self.rows = (zeros, zeros), len(images)
        weights = np.ones(len(images), np.float32)
        x, y, w = self._device([images, np.asarray(labels, dtype=np.int32), weights], max(self.rows, len(images)))
        self.count += 1
        self.params, self.moments, loss = self._step(self.params, self.moments, self.count, x, y, w)
        return float(loss)

    def predict(self, images: np.ndarray, rows: int = 256) -> np.ndarray:
        """Predicted labels (N,) int64 for a batch of images (run `rows` at a time)."""
        if self.params is None:
            raise untrained()
        images = checked(images)
        out = [np.asarray(self._predict(self.params, self._device([images[i : i + rows]], rows)[0]))
               for i in range(0, len(images), rows)]
        return np.concatenate(out)[: len(images)].argmax(axis=1).astype(np.int64)
