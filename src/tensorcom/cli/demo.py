"""`tensorcom demo`: serve a small synthetic image dataset on loopback and train a classifier on it.

Steps: make (once, cached) the demo dataset of coloured shapes (tensorcom.demo.data); start
serve-imagenet-dir as a real subprocess sending augmented batches to a PUSH/PULL connection on
127.0.0.1; train tensorcom.demo.trainer's small classifier (torch when installed, numpy otherwise) on
the batches it receives, printing progress and throughput; evaluate on the held-out test tree,
read directly; print `held-out accuracy: X%`. Exit status 0 when the accuracy reaches
--min-accuracy (90%), 1 otherwise. The server subprocess is terminated on every way out (it is also
tied to this process's life by PR_SET_PDEATHSIG on Linux), so an interrupted demo leaves no orphan.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Iterator

import numpy as np

from tensorcom.cli.common import (
    Parser,
    entry_point,
    fraction,
    nonnegative_int,
    positive_int,
    seconds,
)

MIN_SCALE = 0.35  # crops keep at least 35% of the image, so the shape stays in view


def build_parser() -> argparse.ArgumentParser:
    """Command line of `tensorcom demo`."""
    parser = Parser(prog="tensorcom demo", description="Serve a synthetic dataset on loopback and train on it.")
    parser.add_argument("--epochs", type=positive_int, default=2, help="training epochs (default 2)")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="batch size (default 32)")
    parser.add_argument("--workers", type=positive_int, default=1, help="server publisher processes (default 1)")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="seed of augmentation and model (default 0)")
    parser.add_argument("--no-torch", action="store_true", help="train the numpy model even when torch is installed")
    parser.add_argument("--size", type=positive_int, default=64, help="image size served (default 64)")
    parser.add_argument("--data", default=None, help="dataset directory (default: in the tensorcom cache)")
    parser.add_argument("--min-accuracy", type=fraction, default=0.9, help="accuracy needed to succeed (default 0.9)")
    parser.add_argument("--timeout", type=seconds, default=60.0, help="seconds to wait for a batch (default 60)")
    return parser


def with_progress(batches: Iterator, label: str) -> Iterator:
    """`batches`, shown by a tqdm bar on stderr when that is a terminal and tqdm is installed."""
    if not sys.stderr.isatty():
        return batches
    try:
        from tqdm import tqdm
    except ImportError:
        return batches
    return tqdm(batches, desc=label, unit="batch", leave=False)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def die_with_parent() -> None:
    """preexec_fn: ask Linux to send SIGTERM to this child when its parent dies (no-op elsewhere)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def server_command(args: argparse.Namespace, train_dir: str, url: str) -> list[str]:
    """The serve-imagenet-dir argument list (after the program name) the demo runs."""
    return ["-d", train_dir, "-b", str(args.batch_size), "--size", str(args.size), "--epochs", str(args.epochs),
            "-P", str(args.workers), "--min-scale", str(MIN_SCALE), "--seed", str(args.seed), "-r", "0", url]


@contextlib.contextmanager
def server_process(arguments: list[str], log) -> Iterator[subprocess.Popen]:
    """Run serve-imagenet-dir ARGUMENTS as a subprocess (stderr to `log`); terminate it on exit."""
    command = [sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", *arguments]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
    try:
        yield proc
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """End `proc` if it still runs: SIGTERM, then SIGKILL after `grace` seconds; always reaped."""
    for action in (proc.terminate, proc.kill):
        if proc.poll() is not None:
            return
        action()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)


def progress(epoch: int, epochs: int, images: int, seconds: float, losses: list[float]) -> str:
    """One progress line for a finished epoch."""
    rate = images / max(seconds, 1e-9)
    return f"epoch {epoch}/{epochs}: {images} images in {seconds:.1f} s ({rate:.0f} img/s), mean loss {np.mean(losses):.3f}"


END_OF_EPOCH = "end of epoch"
POLL = 1.0  # seconds the receiving thread waits on the socket before checking for a stop


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


def train(out: queue.Queue, trainer, epochs: int, classes: int, patience: float) -> int:
    """Train on `epochs` epochs of batches from `out`, printing one line per epoch; returns images seen.

    Each batch must be [images uint8 (N, H, W, 3), labels int32 (N,)] with labels in 0..classes-1.
    """
    total = 0
    for epoch in range(1, epochs + 1):
        start, images, losses = time.perf_counter(), 0, []
        for batch in with_progress(received(out, patience), f"epoch {epoch}/{epochs}"):
            pixels, labels = check_batch(batch, classes)
            losses.append(trainer.step(pixels, labels))
            images += len(labels)
        if not images:
            raise RuntimeError(f"epoch {epoch} ended without any batch")
        print(progress(epoch, epochs, images, time.perf_counter() - start, losses), flush=True)
        total += images
    return total


def check_batch(batch, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(images, labels) of a received batch; RuntimeError when it is not what the server should send."""
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


def manual_commands(arguments: list[str], port: int) -> str:
    """The commands a user would type to do by hand what the demo does."""
    server = shlex.join(["serve-imagenet-dir", *arguments])
    monitor = shlex.join(["tensormon", f"zpull://127.0.0.1:{port}"])
    return (f"the same by hand, in two shells (a training job reads the URL that tensormon watches):\n"
            f"  {server}\n  {monitor}")


def run_demo(args: argparse.Namespace) -> float:
    """Make the data, serve it, train, evaluate; returns the held-out accuracy (0..1)."""
    from tensorcom.demo.data import make_demo_dataset
    from tensorcom.demo.trainer import make_trainer

    start = time.perf_counter()
    data = make_demo_dataset(args.data, size=args.size) if args.data else make_demo_dataset(size=args.size)
    classes = len(data.classes)
    print(f"dataset: {classes} classes of coloured shapes in {data.root} ({time.perf_counter() - start:.1f} s)", flush=True)
    port = free_port()
    arguments = server_command(args, str(data.train_dir), f"zpush://127.0.0.1:{port}")
    print(manual_commands(arguments, port), flush=True)
    trainer = make_trainer(classes, backend="numpy" if args.no_torch else "auto", seed=args.seed)
    print(f"training a {trainer.backend} classifier on batches served from zpull://127.0.0.1:{port}", flush=True)
    with tempfile.TemporaryFile("w+") as log:
        try:
            seen = serve_and_train(args, arguments, port, trainer, classes, log)
        except Exception:  # show what the server said, then fail
            log.seek(0)
            sys.stderr.write(log.read()[-2000:])
            raise
    print(f"trained on {seen} images in {time.perf_counter() - start:.1f} s since the start", flush=True)
    return evaluate(trainer, str(data.test_dir), args.size)


def serve_and_train(args: argparse.Namespace, arguments: list[str], port: int, trainer, classes: int, log) -> int:
    """Bind zpull on `port`, start the server, train on what a receiving thread collects; returns
    the number of training images. The server and the thread are stopped on every way out."""
    from tensorcom.transport.connection import Connection

    conn = Connection(f"zpull://127.0.0.1:{port}", timeout=POLL)
    out: queue.Queue = queue.Queue()  # unbounded (the demo data is small): training never holds the server back
    stop = threading.Event()
    thread = threading.Thread(target=receive_loop, args=(conn, args.epochs, out, stop, args.timeout), daemon=True)
    try:
        with server_process(arguments, log) as server:
            thread.start()
            seen = train(out, trainer, args.epochs, classes, args.timeout)
            with contextlib.suppress(subprocess.TimeoutExpired):  # done; it is stopped below if still there
                server.wait(timeout=10)
        return seen
    finally:
        stop.set()
        if thread.ident is not None:
            thread.join(timeout=2 * POLL + 1)
        if not thread.is_alive():  # never close a socket another thread may be using
            conn.close()


@entry_point
def main(argv: list[str] | None = None) -> int:
    """tensorcom demo: returns 0 when the held-out accuracy reaches --min-accuracy, else 1."""
    args = build_parser().parse_args(argv)
    accuracy = run_demo(args)
    print(f"held-out accuracy: {100 * accuracy:.1f}%", flush=True)
    return 0 if accuracy >= args.min_accuracy else 1
