"""The demo's trainer backends by name: `make_trainer(classes, backend=...)` -> a fresh Trainer.

    "numpy", "torch"   tensorcom.demo.trainer (NumpyTrainer, TorchTrainer)
    "keras"            tensorcom.demo.keras_trainer (KerasTrainer)
    "jax"              tensorcom.demo.jax_trainer (JaxTrainer)
    "auto"             torch when importable, else numpy

The backends import the Trainer base from tensorcom.demo.trainer; this module, which imports them,
is imported by none of them. A framework is imported only when its backend is made.
"""

from __future__ import annotations

import importlib.util

from tensorcom.checks import choice
from tensorcom.demo.trainer import NumpyTrainer, Trainer, TorchTrainer

BACKENDS = ("auto", "torch", "keras", "jax", "numpy")


def torch_available() -> bool:
    """True when torch can be imported (checked without importing it)."""
    return importlib.util.find_spec("torch") is not None


def make_trainer(classes: int, *, backend: str = "auto", seed: int = 0, lr: float | None = None) -> Trainer:
    """A fresh classifier for `classes` labels (0..classes-1).

    backend: one of BACKENDS. lr: learning rate (backend default when None). Raises ValueError for a bad
    backend or class count, MissingDependency (an ImportError) naming the extra for a framework that is
    not installed.
    """
    choice("backend", backend, BACKENDS)
    if isinstance(classes, bool) or not isinstance(classes, int) or classes < 2:
        raise ValueError(f"classes must be an int >= 2, not {classes!r}")
    if backend == "auto":
        backend = "torch" if torch_available() else "numpy"
    if backend == "torch":
        return TorchTrainer(classes, seed=seed, lr=lr)
    if backend == "keras":
        from tensorcom.demo.keras_trainer import KerasTrainer

        return KerasTrainer(classes, seed=seed, lr=lr)
    if backend == "jax":
        from tensorcom.demo.jax_trainer import JaxTrainer

        return JaxTrainer(classes, seed=seed, lr=lr)
    return NumpyTrainer(classes, seed=seed, lr=lr)
