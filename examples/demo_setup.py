"""What every example sets up: the demo data set, its held-out images, and a data server on 127.0.0.1.

    data, size = demo_data(short)                coloured shapes (tensorcom.demo.data), made once, then cached
    test = held_out(str(data.test_dir), size)    a Pipeline of [images uint8 (N, size, size, 3), labels]
    with image_server(str(data.train_dir), "zshare://127.0.0.1:PORT", epochs=3, batch_size=32, size=size):
        ...                                      serve-imagenet-dir as a subprocess, stopped on the way out
    serve_in_thread(pipeline, "zpush://127.0.0.1:PORT", epochs)    tensorcom.serve, from a thread here

No training framework is imported here: the Keras and JAX examples use it as the PyTorch ones do.
Copy it along with the example you copy.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator

import tensorcom
from tensorcom.demo.data import DemoDataset, make_demo_dataset
from tensorcom.demo.server import free_port, server_arguments, server_process

__all__ = ["SHORT", "demo_data", "free_port", "held_out", "image_server", "serve_in_thread"]

SHORT = {"classes": 4, "per_class_train": 64, "per_class_test": 25, "size": 32}  # --short: a run of seconds


def demo_data(short: bool) -> tuple[DemoDataset, int]:
    """(the demo data set, its image size): ImageFolder trees and tar shards of coloured shapes, made once
    and then cached (under $TENSORCOM_CACHE when set); 10 classes of 64x64 images, or with `short` SHORT's."""
    if short:
        return make_demo_dataset(**SHORT), SHORT["size"]
    return make_demo_dataset(), 64


def held_out(test: str | list[str], size: int, batch_size: int = 100) -> tensorcom.Pipeline:
    """The held-out images, an ImageFolder directory or a list of tar shard URLs (jpg + cls members), as a
    Pipeline of [images uint8 (N, size, size, 3), labels] batches."""
    source = tensorcom.ShardDataset(test) if isinstance(test, list) else tensorcom.images.ImageFolderSource(test)
    resize = tensorcom.images.eval_transform(size, size)
    return tensorcom.Pipeline(source).to_tuple("jpg", "cls").map_tuple(resize, int).batch(batch_size)


@contextlib.contextmanager
def image_server(train_dir: str, url: str, *, epochs: int, batch_size: int, size: int,
                 min_consumers: int = 1) -> Iterator[subprocess.Popen]:
    """`serve-imagenet-dir` on `train_dir` in a subprocess (ended with this process, even when it is
    killed): `epochs` epochs of augmented [images uint8 (N, size, size, 3), labels int32 (N,)] batches to
    `url`, once `min_consumers` have joined (zshare/zsplit URLs). Leaving the block gives it 10 s to finish
    its stream before it is stopped; leaving by an exception stops it at once."""
    arguments = server_arguments(train_dir=train_dir, url=url, batch_size=batch_size, size=size, epochs=epochs,
                                 workers=1, seed=0, min_consumers=min_consumers)
    print("server:", shlex.join(["serve-imagenet-dir", *arguments]), file=sys.stderr)
    with server_process(arguments, log=None) as server:
        yield server
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=10)


def serve_in_thread(pipeline: tensorcom.Pipeline, url: str, epochs: int) -> threading.Thread:
    """Serve `epochs` epochs of `pipeline` to `url` from one worker process, started by a thread here
    (join the thread once the last epoch is read)."""
    server = threading.Thread(target=tensorcom.serve, args=(pipeline, url),
                              kwargs={"epochs": epochs, "report": None}, daemon=True)
    server.start()
    return server
