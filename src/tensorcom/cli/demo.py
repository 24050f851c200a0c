"""`tensorcom demo`: serve a small synthetic image dataset on loopback and train a classifier on it.

`--framework torch|keras|jax|numpy` picks what trains it (default: torch when installed, else numpy;
`--no-torch` is numpy). Keras runs on the backend the user chose ($KERAS_BACKEND, keras.json), torch
when none was.

What it runs is tensorcom.demo.run (dataset, serve-imagenet-dir subprocess, training, evaluation);
this module parses the options, prints the progress lines and ends with `held-out accuracy: X%`.
Exit status 0 when the accuracy reaches --min-accuracy (90%), 1 otherwise, 2 on bad usage. The server
subprocess is terminated on every way out (and tied to this process's life on Linux), so an
interrupted demo leaves no orphan.
"""

from __future__ import annotations

import argparse
import functools

from tensorcom.cli.common import Parser, entry_point, fraction, nonnegative_int, positive_int, seconds
from tensorcom.demo.backends import BACKENDS
from tensorcom.extras import require

FRAMEWORKS = tuple(name for name in BACKENDS if name != "auto")  # "auto" is the option's absence


def build_parser() -> argparse.ArgumentParser:
    """Command line of `tensorcom demo`."""
    parser = Parser(prog="tensorcom demo", description="Serve a synthetic dataset on loopback and train on it.")
    parser.add_argument("--epochs", type=positive_int, default=2, help="training epochs (default 2)")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="batch size (default 32)")
    parser.add_argument("--workers", type=positive_int, default=1, help="server publisher processes (default 1)")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="seed of augmentation and model (default 0)")
    parser.add_argument("--framework", choices=FRAMEWORKS, default=None,
                        help="train with this framework (default: torch when installed, else numpy)")
    parser.add_argument("--no-torch", action="store_true", help="train the numpy model even when torch is installed")
    parser.add_argument("--size", type=positive_int, default=64, help="image size served (default 64)")
    parser.add_argument("--data", default=None, help="dataset directory (default: in the tensorcom cache)")
    parser.add_argument("--classes", type=positive_int, default=10, help="classes of shapes, 2 to 10 (default 10)")
    parser.add_argument("--per-class", type=positive_int, default=200,
                        help="training images per class (default 200; a quarter as many are held out)")
    parser.add_argument("--min-accuracy", type=fraction, default=0.9, help="accuracy needed to succeed (default 0.9)")
    parser.add_argument("--timeout", type=seconds, default=60.0, help="seconds to wait for a batch (default 60)")
    return parser


@entry_point
def main(argv: list[str] | None = None) -> int:
    """tensorcom demo: returns 0 when the held-out accuracy reaches --min-accuracy, else 1."""
    from tensorcom.demo.run import DemoConfig, run_demo

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.no_torch and args.framework not in (None, "numpy"):
        parser.error(f"--no-torch trains the numpy model; it cannot go with --framework {args.framework}")
    if not 2 <= args.classes <= 10:
        parser.error(f"--classes must be 2 to 10, not {args.classes}")
    backend = "numpy" if args.no_torch else args.framework or "auto"
    require("PIL")  # the dataset's images are made and decoded with Pillow
    check_framework(backend)
    config = DemoConfig(epochs=args.epochs, batch_size=args.batch_size, workers=args.workers, seed=args.seed,
                        size=args.size, data=args.data, backend=backend, timeout=args.timeout,
                        classes=args.classes, per_class=args.per_class)
    accuracy = run_demo(config, say=functools.partial(print, flush=True))
    print(f"held-out accuracy: {100 * accuracy:.1f}%", flush=True)
    return 0 if accuracy >= args.min_accuracy else 1


def check_framework(backend: str) -> None:
    """Fail at once (MissingDependency naming the extra) when the framework asked for is not installed;
    keras is imported on the backend it will train on (torch unless the user chose one:
    adapters.keras.import_keras)."""
    if backend == "keras":
        from tensorcom.adapters.keras import import_keras

        import_keras()
    elif backend in ("torch", "jax"):
        require(backend)
