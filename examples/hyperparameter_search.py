"""A hyper-parameter search: three training jobs with different learning rates share ONE data server.

    python examples/hyperparameter_search.py                      # learning rates 0.01, 0.003, 0.001
    python examples/hyperparameter_search.py --short --lrs 0.01,0.001,0.0001

This process serves the demo images once: `tensorcom.serve` runs the pipeline serve-imagenet-dir runs
(tensorcom.images.dir_pipeline: decode, random crop, flip, batch) and shares it at
zshare://127.0.0.1:PORT with min_consumers=3, so it waits for the three jobs, then sends every batch
to every job (decoded once for all three). Each job is a separate process that joins with

    tensorcom.torch.loader("zjoin://127.0.0.1:PORT", images={0: "NHWC"}, dtype="float32", device=device)

and trains pytorch_train.py's model with its own learning rate. torch is imported by the jobs only: the
server and its worker processes never load it. Prints each job's loss per epoch as it goes, then one
line per job, best first: "lr 0.003: loss 1.234 -> 0.123, held-out accuracy 97.0%".
"""

from __future__ import annotations

import argparse
import multiprocessing

from demo_setup import demo_data, free_port, held_out

import tensorcom


def job(lr: float, url: str, epochs: int, data, size: int, device: str, results) -> None:
    """One training job, in its own process: join the server at `url`, train `epochs` epochs with
    learning rate `lr`, put (lr, losses per epoch, held-out accuracy) on `results`."""
    import pytorch_train as example  # the example beside this one: its model, training epoch and evaluation
    import torch

    torch.set_num_threads(1)  # three jobs and a server on a few cores
    torch.manual_seed(0)  # the same initial weights in every job: only the learning rate differs
    model = example.make_model(len(data.classes)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loader = tensorcom.torch.loader(url, images={0: "NHWC"}, dtype="float32", device=device, timeout=120)
    losses = []
    for epoch in range(1, epochs + 1):
        loss, _ = example.train_epoch(model, loader, optimizer)
        losses.append(loss)
        # one write per line (print writes the newline apart): the three jobs share one stdout
        print(f"job lr={lr:g}: epoch {epoch}: loss {loss:.3f}\n", end="", flush=True)
    loader.dataset.close()
    results.put((lr, losses, example.accuracy(model, held_out(str(data.test_dir), size), device)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lrs", default="0.01,0.003,0.001", help="comma-separated learning rates, one job each")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default 4, --short 3)")
    parser.add_argument("--device", default="cpu", help="where the jobs train (all on one GPU is fine: 'cuda')")
    parser.add_argument("--short", action="store_true", help="a small data set and 3 epochs (for tests)")
    args = parser.parse_args()
    lrs = [float(lr) for lr in args.lrs.split(",")]
    epochs = args.epochs or (3 if args.short else 4)
    data, size = demo_data(args.short)
    port = free_port()
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    jobs = [spawn.Process(target=job, args=(lr, f"zjoin://127.0.0.1:{port}", epochs, data, size, args.device, results),
                          daemon=True) for lr in lrs]
    for process in jobs:
        process.start()
    pipeline = tensorcom.images.dir_pipeline(str(data.train_dir), batch_size=32, size=size, min_scale=0.35)
    served = tensorcom.serve(pipeline, f"zshare://127.0.0.1:{port}", epochs=epochs, min_consumers=len(jobs),
                             report=None)
    print(f"served {served['batches']} batches once, to {len(jobs)} jobs", flush=True)
    finished = sorted((results.get(timeout=120) for _ in jobs), key=lambda result: -result[2])
    for process in jobs:
        process.join(timeout=30)
    for lr, losses, accuracy in finished:
        print(f"lr {lr:g}: loss {losses[0]:.3f} -> {losses[-1]:.3f}, held-out accuracy {100 * accuracy:.1f}%")


if __name__ == "__main__":
    main()
