"""The small image classifier that `tensorcom demo` trains, in numpy and in torch, and the `Trainer`
base that every backend (also tensorcom.demo.keras_trainer and jax_trainer) implements.

Every backend is a `Trainer`: `step(images, labels) -> loss` takes one batch of uint8 (or float)
images shaped (N, H, W, C) and integer labels (N,) and does one optimizer step; `predict(images) ->
labels` and `accuracy(images, labels) -> fraction` evaluate. tensorcom.demo.backends.make_trainer
picks the backend by name (this module imports no other backend). No backend needs a GPU; all are
sized to learn the demo's coloured shapes in seconds on two cores.
"""

from __future__ import annotations

import numpy as np

DEFAULT_LR = 3e-3


class Trainer:
    """What the demo calls, and what every backend shares: `classes`, `seed`, `lr` (DEFAULT_LR when
    None), and `accuracy` through the backend's `predict`. A backend defines `step` and `predict`."""

    backend: str

    def __init__(self, classes: int, *, seed: int = 0, lr: float | None = None):
        self.classes, self.seed = classes, seed
        self.lr = DEFAULT_LR if lr is None else float(lr)

    def step(self, images: np.ndarray, labels: np.ndarray) -> float:
        """One optimizer step on the batch; returns its mean cross-entropy before the step."""
        raise NotImplementedError

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Predicted labels (N,) int64 for a batch of images; ValueError (`untrained()`) before any step."""
        raise NotImplementedError

    def accuracy(self, images: np.ndarray, labels: np.ndarray) -> float:
        """Fraction of `images` whose predicted label equals `labels`."""
        return float((self.predict(checked(images, labels)) == np.asarray(labels)).mean())


def untrained() -> ValueError:
    """The error `predict` raises before the model has seen a batch."""
    return ValueError("predict() before any step(): the model has not seen data yet")


def checked(images: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
    """`images` as an array, once it is a batch (N, H, W, C) with C in 1, 3, 4 and `labels`, when given,
    integers (N,); ValueError otherwise."""
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] not in (1, 3, 4):
        raise ValueError(f"images must be shaped (N, H, W, C) with C in 1, 3, 4; got {images.shape}")
    if labels is not None:
        labels = np.asarray(labels)
        if labels.shape != images.shape[:1] or labels.dtype.kind not in "iu":
            raise ValueError(f"labels must be integers shaped ({images.shape[0]},); got {labels.dtype} {labels.shape}")
    return images


def check_batch(images: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
    """`checked(images, labels)` as float32 in [0, 1] (uint8 divided by 255)."""
    images = checked(images, labels)
    if images.dtype == np.uint8:
        return images.astype(np.float32) * np.float32(1 / 255)
    return images.astype(np.float32, copy=False)


def pooled_features(images: np.ndarray, grid: int = 8, bins: int = 4) -> np.ndarray:
    """Features for the numpy model from float images (N, H, W, C) in [0, 1].

    Returns (N, F): the image averaged down to grid×grid cells (layout); the per-channel mean; and,
    over the tenth of the pixels that differ most from the median cell colour (the foreground),
    their mean colour and a bins³ colour histogram (bins per channel; for C != 3 the channel mean).
    """
    n, h, w, c = images.shape
    gh, gw = max(1, h // grid), max(1, w // grid)
    cut = images[:, : gh * (h // gh), : gw * (w // gw)]
    cells = cut.reshape(n, h // gh, gh, w // gw, gw, c).mean(axis=(2, 4))
    flat = images.reshape(n, h * w, c)
    background = np.median(cells.reshape(n, -1, c), axis=1)[:, None, :]  # median of the cell means
    deviation = np.abs(flat - background).sum(axis=2)
    k = max(1, h * w // 10)
    top = np.argpartition(deviation, -k, axis=1)[:, -k:]
    fore = np.take_along_axis(flat, top[:, :, None], axis=1)  # (N, K, C)
    levels = np.minimum((fore * bins).astype(np.int64), bins - 1)
    if c == 3:
        codes = levels[..., 0] * bins * bins + levels[..., 1] * bins + levels[..., 2]
    else:
        codes = levels.mean(-1).astype(np.int64)
    size = bins**3 if c == 3 else bins
    offsets = (codes + np.arange(n)[:, None] * size).ravel()
    hist = np.bincount(offsets, minlength=n * size).reshape(n, size).astype(np.float32) / codes.shape[1]
    return np.concatenate([cells.reshape(n, -1), flat.mean(axis=1), fore.mean(axis=1), hist], axis=1)


class NumpyTrainer(Trainer):
    """A one-hidden-layer network on pooled image features, trained with Adam; pure numpy.

    Inputs are resized implicitly by pooling, so any image size works (the feature width is fixed by the
    first batch seen).
    """

    backend = "numpy"

    def __init__(self, classes: int, *, seed: int = 0, lr: float | None = None, hidden: int = 128):
        super().__init__(classes, seed=seed, lr=lr)
        self.hidden = hidden
        self.rng = np.random.default_rng(seed)
        self.params: dict[str, np.ndarray] = {}
        self.moments: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.steps = 0
        self.center: np.ndarray | None = None

    def _features(self, images: np.ndarray) -> np.ndarray:
        """Pooled features, centred with the statistics of the first batch; creates the weights then."""
        feats = pooled_features(check_batch(images))
        if self.center is None:
            self.center = feats.mean(axis=0)
            self.scale = feats.std(axis=0) + 0.05
            width = feats.shape[1]
            self.params = {
                "w1": self.rng.normal(0, (2 / width) ** 0.5, (width, self.hidden)).astype(np.float32),
                "b1": np.zeros(self.hidden, np.float32),
                "w2": self.rng.normal(0, (1 / self.hidden) ** 0.5, (self.hidden, self.classes)).astype(np.float32),
                "b2": np.zeros(self.classes, np.float32),
            }
            self.moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in self.params.items()}
        return ((feats - self.center) / self.scale).astype(np.float32)

    def _forward(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(hidden activations, logits) for centred features x."""
        p = self.params
        hidden = np.maximum(x @ p["w1"] + p["b1"], 0)
        return hidden, hidden @ p["w2"] + p["b2"]

    def step(self, images: np.ndarray, labels: np.ndarray) -> float:
        """One Adam step on the batch; returns the mean cross-entropy before the step."""
        x = self._features(check_batch(images, labels))  # float32 from here: not converted twice
        labels = np.asarray(labels, dtype=np.int64)
        hidden, logits = self._forward(x)
        logits = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        n = len(labels)
        loss = float(-np.log(probs[np.arange(n), labels] + 1e-12).mean())
        dlogits = probs
        dlogits[np.arange(n), labels] -= 1
        dlogits /= n
        dhidden = (dlogits @ self.params["w2"].T) * (hidden > 0)
        grads = {"w2": hidden.T @ dlogits, "b2": dlogits.sum(0), "w1": x.T @ dhidden, "b1": dhidden.sum(0)}
        self._adam(grads)
        return loss

    def _adam(self, grads: dict[str, np.ndarray], beta1: float = 0.9, beta2: float = 0.999) -> None:
        """Apply one Adam update with bias correction to every parameter."""
        self.steps += 1
        for name, grad in grads.items():
            m, v = self.moments[name]
            m *= beta1
            m += (1 - beta1) * grad
            v *= beta2
            v += (1 - beta2) * grad * grad
            m_hat = m / (1 - beta1**self.steps)
            v_hat = v / (1 - beta2**self.steps)
            self.params[name] -= (self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)).astype(np.float32)

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Predicted labels (N,) int64 for a batch of images."""
        if self.center is None:
            raise untrained()
        return self._forward(self._features(images))[1].argmax(axis=1)


def _torch_model(classes: int, channels: int):
    """A small CNN (2x average pool, three strided conv blocks, global average pool, linear) for any image size."""
    from torch import nn

    def block(cin: int, cout: int) -> list:
        return [nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(
        nn.AvgPool2d(2, ceil_mode=True), *block(channels, 16), *block(16, 32), *block(32, 64),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes),
    )


class TorchTrainer(Trainer):
    """A small CNN trained with Adam on the CPU; images (N, H, W, C) are converted to NCHW float.

    `threads` (default 1) sets torch's intra-op threads for the process: this model is too small to
    gain from more, and with the data server on the other cores, extra threads only spin and wait.
    Adam's update is written out (`_adam`, torch.optim.Adam's defaults): the first use of torch.optim
    imports torch._dynamo, 1-2 s of CPU at the start of every demo run.
    """

    backend = "torch"

    def __init__(self, classes: int, *, seed: int = 0, lr: float | None = None, threads: int | None = 1):
        from tensorcom.extras import require

        super().__init__(classes, seed=seed, lr=lr)
        self.torch = require("torch")
        if threads:
            self.torch.set_num_threads(threads)
        self.model = None
        self.moments: list = []  # (first, second) moment per parameter
        self.steps = 0

    def _tensor(self, images: np.ndarray):
        """Float NCHW tensor in [0, 1] (roughly centred); builds the model on the first call."""
        x = self.torch.from_numpy(check_batch(images)).permute(0, 3, 1, 2).contiguous() - 0.5
        if self.model is None:
            self.torch.manual_seed(self.seed)
            self.model = _torch_model(self.classes, x.shape[1])
            self.moments = [(self.torch.zeros_like(p), self.torch.zeros_like(p)) for p in self.model.parameters()]
        return x

    def step(self, images: np.ndarray, labels: np.ndarray) -> float:
        """One Adam step on the batch; returns the mean cross-entropy before the step."""
        x = self._tensor(check_batch(images, labels))  # float32 from here: not converted twice
        y = self.torch.from_numpy(np.asarray(labels, dtype=np.int64))
        self.model.train()
        loss = self.torch.nn.functional.cross_entropy(self.model(x), y)
        self.model.zero_grad()
        loss.backward()
        self._adam()
        return float(loss.detach())

    def _adam(self, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        """One Adam update with bias correction of every parameter, from the gradients of the last backward."""
        self.steps += 1
        first, second = 1 - beta1**self.steps, 1 - beta2**self.steps
        with self.torch.no_grad():
            for param, (m, v) in zip(self.model.parameters(), self.moments):
                m.mul_(beta1).add_(param.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(param.grad, param.grad, value=1 - beta2)
                param.addcdiv_(m, (v / second).sqrt_().add_(eps), value=-self.lr / first)

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Predicted labels (N,) int64 for a batch of images."""
        if self.model is None:
            raise untrained()
        self.model.eval()
        with self.torch.no_grad():
            return self.model(self._tensor(images)).argmax(dim=1).numpy()
