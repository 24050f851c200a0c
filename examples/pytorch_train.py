"""Train a small image classifier from a tensorcom data server, through the PyTorch adapter.

    python examples/pytorch_train.py            # the demo data set (10 classes, 64x64), 5 epochs
    python examples/pytorch_train.py --short    # a small one (4 classes, 32x32), 3 epochs: seconds

A server process, `serve-imagenet-dir` (decode, random crop, flip, batch: tensorcom.images.dir_pipeline),
shares the training images at zshare://127.0.0.1:PORT. The training loop joins it with one line,

    loader = tensorcom.torch.loader("zjoin://127.0.0.1:PORT", images={0: "NHWC"}, dtype="float32", device=device)

and each `for images, labels in loader` is one epoch of the server: images arrive as NCHW float32
tensors on `device` (pinned and copied with non_blocking=True when it is a GPU). The held-out images are
read here, through the same adapter over a local tensorcom.Pipeline. Prints the mean loss of each epoch
and the held-out accuracy. The other examples use this file's helpers (model, server, evaluation).
"""

from __future__ import annotations

import argparse
import shlex
import socket
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch import nn

import tensorcom
from tensorcom.demo.data import make_demo_dataset


def demo_data(short: bool):
    """(the demo data set, its image size): ImageFolder trees and tar shards of coloured shapes, made once
    and then cached (tensorcom.demo.data)."""
    if short:
        return make_demo_dataset(classes=4, per_class_train=64, per_class_test=25, size=32), 32
    return make_demo_dataset(), 64


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(train_dir: str, url: str, *, epochs: int, batch_size: int, size: int, min_consumers: int = 1,
                 workers: int = 1) -> subprocess.Popen:
    """Start `serve-imagenet-dir` on `train_dir` (written so as to need no activated environment): `epochs`
    epochs of augmented [images uint8 (N, size, size, 3), labels int32 (N,)] batches to `url`, from
    `workers` publisher processes, once `min_consumers` have joined (zshare/zsplit URLs)."""
    arguments = ["-d", train_dir, "-b", str(batch_size), "--size", str(size), "--min-scale", "0.35", "--epochs",
                 str(epochs), "-P", str(workers), "--min-consumers", str(min_consumers), "-q", url]
    print("server:", shlex.join(["serve-imagenet-dir", *arguments]), file=sys.stderr)
    return subprocess.Popen([sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", *arguments])


def stop_server(server: subprocess.Popen) -> None:
    """Give the server a little time to finish its stream, then make sure it is gone."""
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.terminate()
        server.wait()


def make_model(classes: int) -> nn.Module:
    """A small CNN for RGB images of any size: three strided conv blocks, global pooling, a linear layer."""
    layers, width = [], 3
    for out in (16, 32, 64):
        layers += [nn.Conv2d(width, out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU()]
        width = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, classes))


def train_epoch(model: nn.Module, loader, optimizer) -> tuple[float, int]:
    """One pass over `loader` ([images, labels] batches, images float 0..255); (mean loss, images)."""
    total, count = 0.0, 0
    for images, labels in loader:
        loss = F.cross_entropy(model(images / 255 - 0.5), labels.long())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.detach() * len(labels)  # no .item() per step: the GPU runs on without waiting
        count += len(labels)
    return float(total) / max(count, 1), count


def held_out(test_dir: str, size: int, batch_size: int = 100) -> tensorcom.Pipeline:
    """The held-out ImageFolder as a Pipeline of (images (N, size, size, 3) uint8, labels) batches."""
    resize = tensorcom.images.eval_transform(size, size)
    source = tensorcom.images.ImageFolderSource(test_dir)
    return tensorcom.Pipeline(source).to_tuple("jpg", "cls").map_tuple(resize, None).batch(batch_size)


def accuracy(model: nn.Module, batches, device: str) -> float:
    """Fraction of the `batches` (a Pipeline of images and labels) that `model` labels right."""
    model.eval()
    correct = total = 0
    # even=False: under DDP only one rank evaluates, with nobody to keep even with
    test = tensorcom.torch.loader(batches, images={0: "NHWC"}, dtype="float32", device=device, even=False)
    with torch.no_grad():
        for images, labels in test:
            correct += int((model(images / 255 - 0.5).argmax(1) == labels).sum())
            total += len(labels)
    model.train()
    return correct / max(total, 1)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=None, help="epochs to train (default 5, --short 3)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--device", default=default_device())
    parser.add_argument("--short", action="store_true", help="a small data set and 3 epochs (for tests)")
    args = parser.parse_args()
    epochs = args.epochs or (3 if args.short else 5)
    data, size = demo_data(args.short)
    if args.device == "cpu":
        torch.set_num_threads(1)  # a small model; the server's processes use the other cores
    url = f"127.0.0.1:{free_port()}"
    server = start_server(str(data.train_dir), f"zshare://{url}", epochs=epochs, batch_size=args.batch_size, size=size)
    try:
        torch.manual_seed(0)
        model = make_model(len(data.classes)).to(args.device)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        loader = tensorcom.torch.loader(f"zjoin://{url}", images={0: "NHWC"}, dtype="float32", device=args.device,
                                        timeout=120)
        for epoch in range(1, epochs + 1):
            loss, images = train_epoch(model, loader, optimizer)
            print(f"epoch {epoch}: loss {loss:.3f} ({images} images)", flush=True)
        loader.dataset.close()
        print(f"held-out accuracy: {100 * accuracy(model, held_out(str(data.test_dir), size), args.device):.1f}%")
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
