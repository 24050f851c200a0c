"""Train a small image classifier from a tensorcom data server, through the PyTorch adapter.

    python examples/pytorch_train.py            # the demo data set (10 classes, 64x64), 5 epochs
    python examples/pytorch_train.py --short    # a small one (4 classes, 32x32), 3 epochs: seconds

A server process, `serve-imagenet-dir` (decode, random crop, flip, batch: tensorcom.images.dir_pipeline),
shares the training images at zshare://127.0.0.1:PORT. The training loop joins it with one line,

    loader = tensorcom.torch.loader("zjoin://127.0.0.1:PORT", images={0: "NHWC"}, dtype="float32", device=device)

and each `for images, labels in loader` is one epoch of the server: images arrive as NCHW float32
tensors on `device` (pinned and copied with non_blocking=True when it is a GPU). The held-out images are
read here, through the same adapter over a local tensorcom.Pipeline. Prints the mean loss of each epoch
and the held-out accuracy. The data set and the server come from demo_setup.py, beside this file; the
other PyTorch examples use this file's model, training epoch and evaluation.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from demo_setup import demo_data, free_port, held_out, image_server
from torch import nn

import tensorcom


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
    with image_server(str(data.train_dir), f"zshare://{url}", epochs=epochs, batch_size=args.batch_size, size=size):
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


if __name__ == "__main__":
    main()
