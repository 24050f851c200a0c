"""The demo's classifier in Keras 3 (`tensorcom demo --framework keras`): the same small CNN as the
torch trainer, on whichever backend Keras runs (torch when the user chose none: see
tensorcom.adapters.keras.choose_backend). Implements tensorcom.demo.trainer.Trainer: `step` takes
uint8 (or float) images (N, H, W, C) and integer labels (N,), does one Adam step with
`train_on_batch` and returns the loss before it.
"""

from __future__ import annotations

import numpy as np

from tensorcom.demo.trainer import Trainer, check_batch, untrained


def keras_model(keras, classes: int, channels: int):
    """2x average pool, three strided conv blocks (conv, batch norm, relu), global average pool, linear."""
    layers = keras.layers

    def block(width: int) -> list:
        return [layers.Conv2D(width, 3, strides=2, padding="same", use_bias=False),
                layers.BatchNormalization(momentum=0.9),  # torch's default: settles within the short demo
                layers.ReLU()]

    return keras.Sequential([
        keras.Input((None, None, channels)), layers.AveragePooling2D(2, padding="same"),
        *block(16), *block(32), *block(64), layers.GlobalAveragePooling2D(), layers.Dense(classes),
    ])


class KerasTrainer(Trainer):
    """A small Keras CNN trained with Adam; the model is built on the first batch (its channel count).

    `threads` (default 1) sets the torch backend's intra-op threads, as TorchTrainer does."""

    backend = "keras"

    def __init__(self, classes: int, *, seed: int = 0, lr: float | None = None, threads: int | None = 1):
        from tensorcom.adapters.keras import import_keras
        from tensorcom.extras import require

        super().__init__(classes, seed=seed, lr=lr)
        self.keras = import_keras()
        if threads and self.keras.backend.backend() == "torch":
            require("torch").set_num_threads(threads)
        self.model = None

    def _inputs(self, images: np.ndarray) -> np.ndarray:
        """Float images in [-0.5, 0.5]; builds and compiles the model on the first call."""
        x = check_batch(images) - np.float32(0.5)
        if self.model is None:
            self.keras.utils.set_random_seed(self.seed)
            self.model = keras_model(self.keras, self.classes, x.shape[-1])
            self.model.compile(optimizer=self.keras.optimizers.Adam(self.lr),
                               loss=self.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return x

    def step(self, images: np.ndarray, labels: np.ndarray) -> float:
        """One Adam step on the batch; returns its mean cross-entropy."""
        x = self._inputs(check_batch(images, labels))
        loss = self.model.train_on_batch(x, np.asarray(labels, dtype=np.int32))
        return float(np.asarray(loss).reshape(-1)[0])

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Predicted labels (N,) int64 for a batch of images."""
        if self.model is None:
            raise untrained()
        logits = self.keras.ops.convert_to_numpy(self.model.predict_on_batch(self._inputs(images)))
        return np.asarray(logits).argmax(axis=1).astype(np.int64)
