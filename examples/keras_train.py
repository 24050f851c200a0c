"""Train a Keras 3 image classifier on batches a tensorcom server sends, through the Keras adapter.

    python examples/keras_train.py            # the demo data set (10 classes, 64x64), 5 epochs
    python examples/keras_train.py --short    # a small one (4 classes, 32x32), 3 epochs: seconds

A thread of this program runs `tensorcom.serve` on the demo images (tensorcom.images.dir_pipeline:
decode, random crop, flip, batch) and pushes [images uint8 (N, H, W, 3), labels int32 (N,)] batches,
with an end-of-epoch marker after each epoch, to zpull://127.0.0.1:PORT. The training side is an
ordinary Keras program with one tensorcom line, the connection as a keras PyDataset:

    train = tensorcom.keras.StreamDataset(conn, batches_per_epoch=len(pipeline), transform=images_to_float)
    model.fit(train, epochs=epochs, shuffle=False)

Keras must know an epoch's batches before it starts; here they are the served pipeline's length (a
training job on another machine knows its data set's size the same way). The held-out images are a
local tensorcom.Pipeline, which knows its length, given to model.evaluate through the same adapter.
Keras runs on $KERAS_BACKEND; torch when none was chosen. Prints the loss and accuracy of each epoch
and the held-out accuracy.
"""

from __future__ import annotations

import argparse

from demo_setup import demo_data, free_port, held_out, serve_in_thread

import tensorcom
from tensorcom.images.imagenet import dir_pipeline


def small_cnn(keras, classes: int):
    """Three strided conv blocks, global pooling and a linear layer, for RGB images of any size."""
    blocks = []
    for width in (16, 32, 64):
        blocks += [keras.layers.Conv2D(width, 3, strides=2, padding="same", use_bias=False),
                   keras.layers.BatchNormalization(momentum=0.9), keras.layers.ReLU()]
    return keras.Sequential([keras.Input((None, None, 3)), *blocks, keras.layers.GlobalAveragePooling2D(),
                             keras.layers.Dense(classes)])


def print_epoch(epoch: int, logs: dict) -> None:
    print(f"epoch {epoch + 1}: loss {logs['loss']:.3f} accuracy {logs['accuracy']:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=None, help="epochs to train (default 5, --short 3)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--short", action="store_true", help="a small data set and 3 epochs (for tests)")
    args = parser.parse_args()
    # keras is imported here, not at the top: the server's worker processes re-import this file
    tensorcom.keras.choose_backend()  # KERAS_BACKEND=torch unless you chose a backend (before keras loads)
    import keras

    if keras.backend.backend() == "torch":  # a small model: torch's other threads would only spin and wait
        import torch

        torch.set_num_threads(1)
    epochs = args.epochs or (3 if args.short else 5)
    data, size = demo_data(args.short)
    pipeline = dir_pipeline(str(data.train_dir), batch_size=args.batch_size, size=size, min_scale=0.35)
    url = f"127.0.0.1:{free_port()}"
    with tensorcom.Connection(f"zpull://{url}", timeout=120) as conn:
        server = serve_in_thread(pipeline, f"zpush://{url}", epochs)
        train = tensorcom.keras.StreamDataset(conn, batches_per_epoch=len(pipeline),
                                              transform=tensorcom.keras.images_to_float)
        keras.utils.set_random_seed(0)
        model = small_cnn(keras, len(data.classes))
        model.compile(optimizer=keras.optimizers.Adam(args.lr), metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(train, epochs=epochs, shuffle=False, verbose=0,
                  callbacks=[keras.callbacks.LambdaCallback(on_epoch_end=print_epoch)])
        server.join()
    test = tensorcom.keras.StreamDataset(held_out(str(data.test_dir), size), transform=tensorcom.keras.images_to_float)
    _, accuracy = model.evaluate(test, verbose=0)
    print(f"held-out accuracy: {100 * accuracy:.1f}%")


if __name__ == "__main__":
    main()
