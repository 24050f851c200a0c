"""What `tensorcom demo` does: make the data, serve it on loopback, train on it, evaluate.

    accuracy = run_demo(DemoConfig(epochs=2), say=print)      held-out accuracy, 0..1

Steps: make (once, cached) the dataset of coloured shapes (tensorcom.demo.data); start
serve-imagenet-dir as a subprocess (tensorcom.demo.server) sending augmented batches to a PUSH/PULL
connection on 127.0.0.1; a receiving thread puts the batches on a queue, from which the training loop
trains tensorcom.demo.trainer's classifier, reporting one line per epoch through `say`; then the
held-out test tree is read directly and evaluated. The server and the receiving thread are stopped on
every way out.
"""

from __future__ import annotations

import contextlib
import math
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from tensorcom.demo.server import free_port, manual_commands, server_arguments, server_process
from tensorcom.progress import Progress

END_OF_EPOCH = "end of epoch"
POLL = 1.0  # seconds the receiving thread waits on the socket before checking for a stop


@dataclass(frozen=True)
class DemoConfig:
    """A demo run: training epochs, batch size, server publisher processes, seed, image size served,
    dataset directory (None: in the tensorcom cache), trainer backend (tensorcom.demo.backends.BACKENDS:
    "auto", "torch", "numpy", "keras", "jax"), seconds to wait for a batch, and the dataset's classes
    (2..10) and training images per class (a quarter as many, at least one, are held out)."""

    epochs: int = 2
    batch_size: int = 32
    workers: int = 1
    seed: int = 0
    size: int = 64
    data: str | None = None
    backend: str = "auto"
    timeout: float = 60.0
    classes: int = 10
    per_class: int = 200


def run_demo(config: DemoConfig, say: Callable[[str], None] = print) -> float:
    """Make the data, serve it, train, evaluate; `say` gets each progress line. Returns the held-out
    accuracy (0..1); raises what went wrong, after writing the server's last output to stderr."""
    from tensorcom.demo.data import make_demo_dataset
    from tensorcom.demo.backends import make_trainer

    start = time.perf_counter()
    data = make_demo_dataset(config.data or None, classes=config.classes, per_class_train=config.per_class,
                             per_class_test=max(1, config.per_class // 4), size=config.size)
    classes = len(data.classes)
    say(f"dataset: {classes} classes of coloured shapes in {data.root} ({time.perf_counter() - start:.1f} s)")
    port = free_port()
    arguments = server_arguments(train_dir=str(data.train_dir), url=f"zpush://127.0.0.1:{port}",
                                 batch_size=config.batch_size, size=config.size, epochs=config.epochs,
                                 workers=config.workers, seed=config.seed)
    say(manual_commands(arguments, port))
    trainer = make_trainer(classes, backend=config.backend, seed=config.seed)
    say(f"training a {trainer.backend} classifier on batches served from zpull://127.0.0.1:{port}")
    with tempfile.TemporaryFile("w+") as log:
        try:
            seen = serve_and_train(config, arguments, port, trainer, classes, log, say)
        except Exception:  # show what the server said, then fail
            log.seek(0)
            sys.stderr.write(log.read()[-2000:])
            raise
    say(f"trained on {seen} images in {time.perf_counter() - start:.1f} s since the start")
    return evaluate(trainer, str(data.test_dir), config.size)


def serve_and_train(config: DemoConfig, arguments: list[str], port: int, trainer, classes: int, log,
                    say: Callable[[str], None]) -> int:
    """Bind zpull on `port`, start the server with `arguments`, train on what a receiving thread
    collects; returns the number of training images. The server and the thread are stopped on every
    way out, and the connection closed once the thread has ended."""
    from tensorcom.transport.connection import Connection

    conn = Connection(f"zpull://127.0.0.1:{port}", timeout=POLL)
    out: queue.Queue = queue.Queue()  # unbounded (the demo data is small): training never holds the server back
    stop = threading.Event()
    thread = threading.Thread(target=receive_loop, args=(conn, config.epochs, out, stop, config.timeout), daemon=True)
    try:
        with server_process(arguments, log) as server:
            thread.start()
            seen = train(out, trainer, config.epochs, classes, config.timeout, say)
            with contextlib.suppress(subprocess.TimeoutExpired):  # done; it is stopped below if still there
                server.wait(timeout=10)
        return seen
    finally:
        stop.set()
        if thread.ident is not None:
            thread.join(timeout=2 * POLL + 1)
        if not thread.is_alive():  # never close a socket another thread may be using
            conn.close()


def receive_loop(conn, epochs: int, out: queue.Queue, stop: threading.Event, patience: float) -> None:
    """Thread body: put every batch of `epochs` epochs from `conn` on `out`, END_OF_EPOCH after each;
    an exception (RecvTimeout after `patience` seconds of silence) is put on `out` instead. Only this
    thread touches `conn` while it runs; it ends at the last epoch, on an error, or when `stop` is set.
    """
    from tensorcom.errors import RecvTimeout

    try:
        for _ in range(epochs):
            idle = 0.0
            while not stop.is_set():
                try:
                    for batch in conn:
                        out.put(batch)
                        idle = 0.0
                    break
                except RecvTimeout:
                    idle += POLL
                    if idle >= patience:
                        raise
            out.put(END_OF_EPOCH)
    except Exception as exc:  # handed to the training loop, which raises it
        out.put(exc)


def received(out: queue.Queue, patience: float) -> Iterator:
    """The batches of one epoch from `out` (filled by receive_loop); raises what the thread put there."""
    while True:
        try:
            item = out.get(timeout=patience + 5 * POLL)
        except queue.Empty:
            raise TimeoutError(f"no batch from the receiving thread within {patience:.0f} s") from None
        if isinstance(item, str) and item == END_OF_EPOCH:
            return
        if isinstance(item, Exception):
            raise item
        yield item


def train(out: queue.Queue, trainer, epochs: int, classes: int, patience: float, say: Callable[[str], None]) -> int:
    """Train on `epochs` epochs of batches from `out`, saying one line per epoch; returns images seen.

    Each batch must be [images uint8 (N, H, W, 3), labels int32 (N,)] with labels in 0..classes-1.
    """
    total = 0
    for epoch in range(1, epochs + 1):
        start, images, losses = time.perf_counter(), 0, []
        for batch in with_progress(received(out, patience), f"epoch {epoch}/{epochs}"):
            pixels, labels = check_served(batch, classes)
            losses.append(trainer.step(pixels, labels))
            images += len(labels)
        if not images:
            raise RuntimeError(f"epoch {epoch} ended without any batch")
        say(progress(epoch, epochs, images, time.perf_counter() - start, losses))
        total += images
    return total


def with_progress(batches: Iterator, label: str) -> Iterator:
    """`batches`, counted by a tensorcom.progress bar on stderr when that is a terminal (no plain lines:
    the demo prints one line per epoch itself)."""
    with Progress(label, "batches", interval=math.inf) as shown:
        for batch in batches:
            yield batch
            shown.update(1)


def progress(epoch: int, epochs: int, images: int, seconds: float, losses: list[float]) -> str:
    """One progress line for a finished epoch."""
    rate = images / max(seconds, 1e-9)
    return f"epoch {epoch}/{epochs}: {images} images in {seconds:.1f} s ({rate:.0f} img/s), mean loss {np.mean(losses):.3f}"


def check_served(batch, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels) of a received batch; RuntimeError when it is not what serve-imagenet-dir
    sends ([images uint8 (N, H, W, C), labels int32 (N,)] with labels in 0..classes-1)."""
    images, labels = batch
    if images.dtype != np.uint8 or images.ndim != 4 or labels.dtype != np.int32 or labels.shape != images.shape[:1]:
        raise RuntimeError(f"unexpected batch: images {images.dtype} {images.shape}, labels {labels.dtype} {labels.shape}")
    if labels.size and not (0 <= labels.min() and labels.max() < classes):
        raise RuntimeError(f"labels outside 0..{classes - 1}: {sorted(set(labels.tolist()))}")
    return images, labels


def evaluate(trainer, test_dir: str, size: int, batch_size: int = 256) -> float:
    """Accuracy of `trainer` on the ImageFolder `test_dir`, each image resized to size x size."""
    from tensorcom.images import ImageFolder, eval_transform

    folder = ImageFolder(test_dir)
    transform = eval_transform(size, size)
    correct = 0
    for start in range(0, len(folder), batch_size):
        pairs = [folder.read(i) for i in range(start, min(start + batch_size, len(folder)))]
        images = np.stack([transform(data) for data, _ in pairs])
        labels = np.array([label for _, label in pairs])
        correct += int((trainer.predict(images) == labels).sum())
    return correct / max(len(folder), 1)
