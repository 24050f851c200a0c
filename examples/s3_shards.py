"""Tar shards in an S3-compatible store: write the demo data set there, then train from it.

    python examples/s3_shards.py --short                              # starts moto's S3 server itself
    python examples/s3_shards.py --endpoint http://127.0.0.1:9000     # a store you run (MinIO, Ceph, ...)

Without --endpoint the example runs moto's standalone S3 server on 127.0.0.1 (pip install 'moto[server]')
with made-up credentials, and stops it at the end. With --endpoint it uses that store and the
credentials of your environment. Either way it sets AWS_ENDPOINT_URL, which s3fs (and tensorcom's own
settings.s3_endpoint_url) follow, so the s3:// URLs below need no other option.

Writing: tensorcom.shards.ShardWriter("s3://BUCKET/train-%06d.tar") stores the demo images as jpg + cls
members, shuffled, 64 per shard. Reading: tensorcom.images.shards_pipeline (the pipeline
serve-imagenet-shards serves: decode, random crop, flip, batch) goes straight into the PyTorch adapter,
with no server in between:

    loader = tensorcom.torch.loader(pipeline, images={0: "NHWC"}, dtype="float32", device=device)

Prints the shards written, the mean loss of each epoch and the held-out accuracy (read from s3:// too).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import time

import numpy as np
import torch
from demo_setup import demo_data, free_port, held_out
from pytorch_train import accuracy, default_device, make_model, train_epoch

import tensorcom
from tensorcom.shards import ShardWriter


@contextlib.contextmanager
def moto_server():
    """moto's S3 server on a free loopback port, with test credentials in os.environ; yields its URL."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:  # wait until it listens
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("moto's S3 server did not start: pip install 'moto[server]'")
            time.sleep(0.1)
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            os.environ[name] = "testing"
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


def write_shards(folder: str, prefix: str, seed: int = 0) -> list[str]:
    """The images of ImageFolder `folder`, shuffled, as tar shards PREFIX-000000.tar, ... (jpg + cls)."""
    images = tensorcom.images.ImageFolder(folder)
    with ShardWriter(f"{prefix}-%06d.tar", maxcount=64) as sink:
        for index in np.random.default_rng(seed).permutation(len(images)):
            path, label = images.samples[index]
            with open(path, "rb") as stream:
                sink.write({"__key__": f"{index:06d}", "jpg": stream.read(), "cls": label})
    return sink.shards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoint", help="URL of an S3-compatible store (default: start moto's server here)")
    parser.add_argument("--bucket", default="tensorcom-demo")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default 5, --short 3)")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--device", default=default_device())
    parser.add_argument("--short", action="store_true", help="a small data set and 3 epochs (for tests)")
    args = parser.parse_args()
    epochs = args.epochs or (3 if args.short else 5)
    data, size = demo_data(args.short)
    if args.device == "cpu":
        torch.set_num_threads(1)
    with contextlib.nullcontext(args.endpoint) if args.endpoint else moto_server() as endpoint:
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        import fsspec

        store = fsspec.filesystem("s3")
        if not store.exists(args.bucket):
            store.mkdir(args.bucket)
        train = write_shards(str(data.train_dir), f"s3://{args.bucket}/train")
        test = write_shards(str(data.test_dir), f"s3://{args.bucket}/test")
        print(f"wrote {len(train)} training shards ({train[0]} ...) and {len(test)} held-out shards", flush=True)

        pipeline = tensorcom.images.shards_pipeline(train, batch_size=32, size=size, shuffle=True,
                                                    shuffle_buffer=256, min_scale=0.35)
        loader = tensorcom.torch.loader(pipeline, images={0: "NHWC"}, dtype="float32", device=args.device)
        torch.manual_seed(0)
        model = make_model(len(data.classes)).to(args.device)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        for epoch in range(1, epochs + 1):
            pipeline.set_epoch(epoch)  # another shard order, shuffle and augmentation each epoch
            loss, images = train_epoch(model, loader, optimizer)
            print(f"epoch {epoch}: loss {loss:.3f} ({images} images)", flush=True)
        print(f"held-out accuracy: {100 * accuracy(model, held_out(test, size), args.device):.1f}%")


if __name__ == "__main__":
    main()
