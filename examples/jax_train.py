"""Train a JAX image classifier on batches a tensorcom server sends, through the JAX adapter.

    python examples/jax_train.py            # the demo data set (10 classes, 64x64), 5 epochs
    python examples/jax_train.py --short    # a small one (4 classes, 32x32), 3 epochs: seconds
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python examples/jax_train.py --short   # 2 CPU devices

A thread of this program runs `tensorcom.serve` on the demo images (tensorcom.images.dir_pipeline:
decode, random crop, flip, batch) and pushes [images uint8 (N, H, W, 3), labels int32 (N,)] batches,
with an end-of-epoch marker after each epoch, to zpull://127.0.0.1:PORT. The training loop is plain
JAX (a two-layer network and Adam, no other library), fed by one tensorcom line per epoch:

    for images, labels in tensorcom.jax.iterate(conn, sharding=sharding):

which ends with the server's epoch and yields jax arrays put on the devices with jax.device_put,
split along the batch axis over every local device (`tensorcom.jax.batch_sharding()`: a 1-d mesh),
while the parameters are replicated; jit then runs data-parallel. Batch sizes must divide by the
device count. Prints the mean loss of each epoch and the held-out accuracy.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from demo_setup import demo_data, free_port, held_out, serve_in_thread
from jax.sharding import NamedSharding, PartitionSpec

import tensorcom
from tensorcom.images.imagenet import dir_pipeline


def init_params(size: int, classes: int, hidden: int = 256, seed: int = 0) -> dict:
    """Weights of the two-layer network below for size x size RGB images (numpy arrays)."""
    rng, features = np.random.default_rng(seed), (size // 4) ** 2 * 3
    return {"w1": rng.normal(0, np.sqrt(2 / features), (features, hidden)).astype(np.float32),
            "b1": np.zeros(hidden, np.float32),
            "w2": rng.normal(0, np.sqrt(1 / hidden), (hidden, classes)).astype(np.float32),
            "b2": np.zeros(classes, np.float32)}


def logits(params: dict, images: jax.Array) -> jax.Array:
    """Images uint8 (N, H, W, 3) -> 4x4-averaged pixels -> 256 relu units -> class scores."""
    n, h, w, c = images.shape
    x = images.astype(jnp.float32) / 255 - 0.5
    x = x.reshape(n, h // 4, 4, w // 4, 4, c).mean(axis=(2, 4)).reshape(n, -1)
    return jax.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def loss_of(params: dict, images: jax.Array, labels: jax.Array) -> jax.Array:
    log_p = jax.nn.log_softmax(logits(params, images))
    return -jnp.take_along_axis(log_p, labels[:, None], axis=1).mean()


@jax.jit
def train_step(params: dict, adam: tuple, images: jax.Array, labels: jax.Array, lr: float):
    """One Adam step: the new parameters and Adam state (step, m, v), and the loss before the step."""
    loss, grads = jax.value_and_grad(loss_of)(params, images, labels)
    step, m, v = adam
    step = step + 1
    m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, v, grads)
    rate = lr * jnp.sqrt(1 - 0.999**step) / (1 - 0.9**step)
    params = jax.tree_util.tree_map(lambda p, m, v: p - rate * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, (step, m, v), loss


@jax.jit
def predict(params: dict, images: jax.Array) -> jax.Array:
    return logits(params, images).argmax(axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=None, help="epochs to train (default 5, --short 3)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--short", action="store_true", help="a small data set and 3 epochs (for tests)")
    args = parser.parse_args()
    epochs = args.epochs or (3 if args.short else 5)
    data, size = demo_data(args.short)
    sharding = tensorcom.jax.batch_sharding()  # every local device; the batch axis split over them
    print(f"training on {sharding.mesh.devices.size} device(s): {', '.join(map(str, sharding.mesh.devices))}")
    params = jax.device_put(init_params(size, len(data.classes)), NamedSharding(sharding.mesh, PartitionSpec()))
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    adam = (jnp.zeros((), jnp.int32), zeros, zeros)

    pipeline = dir_pipeline(str(data.train_dir), batch_size=args.batch_size, size=size, min_scale=0.35)
    url = f"127.0.0.1:{free_port()}"
    with tensorcom.Connection(f"zpull://{url}", timeout=120) as conn:
        server = serve_in_thread(pipeline, f"zpush://{url}", epochs)
        for epoch in range(1, epochs + 1):
            losses, count = [], 0
            for images, labels in tensorcom.jax.iterate(conn, sharding=sharding):  # one epoch of the server
                params, adam, loss = train_step(params, adam, images, labels, args.lr)
                losses.append(loss)
                count += len(labels)
            print(f"epoch {epoch}: loss {float(np.mean(losses)):.3f} ({count} images)", flush=True)
        server.join()
    correct = total = 0
    for images, labels in tensorcom.jax.iterate(held_out(str(data.test_dir), size), sharding=sharding):
        correct += int((predict(params, images) == labels).sum())
        total += len(labels)
    print(f"held-out accuracy: {100 * correct / max(total, 1):.1f}%")


if __name__ == "__main__":
    main()
