"""Data-parallel training (DDP) in two processes, each rank fed through the PyTorch adapter.

    python examples/ddp_train.py                     # ranks share one zsplit server
    python examples/ddp_train.py --split shard       # each rank decodes its own portion: no server
    python examples/ddp_train.py --short             # a small data set and 3 epochs (for tests)

--split zsplit (the default): one `serve-imagenet-dir` server at zsplit://127.0.0.1:PORT gives each batch
to exactly one rank; every rank joins it as a consumer, `tensorcom.torch.BatchDataset("zjoin://...")`.
A faster rank gets more batches, so the ranks' counts differ.
--split shard: each rank iterates its own portion of the pipeline, `dir_pipeline(...).shard(rank, world)`,
and the portions may differ by a batch.

Either way the adapter keeps the ranks even: before each step the ranks agree (one all_reduce of one
int over gloo) whether all of them have a batch, so every rank takes the same number of steps in each
epoch and none waits for a gradient all_reduce that will not come. What a rank had beyond the others is
dropped and counted (docs/frameworks.md, PyTorch DDP). Runs on the CPU with gloo; with --device cuda each
rank uses GPU `rank` and NCCL (the adapter then makes its own gloo group for the agreement).
Rank 0 prints, per epoch, the mean loss and each rank's batches and drops, then the held-out accuracy.
"""

from __future__ import annotations

import argparse
import contextlib
import os

import torch
import torch.distributed as dist
import torch.multiprocessing
from demo_setup import demo_data, free_port, held_out, image_server
from pytorch_train import accuracy, make_model, train_epoch

import tensorcom


def rank_main(rank: int, world: int, master_port: int, data_url: str, args: argparse.Namespace) -> None:
    """One rank: join the process group, train `args.epochs` epochs of its batches with DDP."""
    cuda = args.device == "cuda"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    device = f"cuda:{rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)
    data, size = demo_data(args.short)
    if args.split == "zsplit":
        source, options = data_url, {"timeout": 120}
    else:  # this rank's portion; its shuffle and augmentation follow the pipeline's epoch (set below)
        source = tensorcom.images.dir_pipeline(str(data.train_dir), batch_size=args.batch_size, size=size,
                                               min_scale=0.35).shard(rank, world)
        options = {}
    dataset = tensorcom.torch.BatchDataset(source, images={0: "NHWC"}, dtype="float32", device=device, **options)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(make_model(len(data.classes)).to(device),
                                                      device_ids=[rank] if cuda else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(1, args.epochs + 1):
        if args.split == "shard":
            source.set_epoch(epoch)
        before = dict(vars(dataset.counts))
        loss, _ = train_epoch(model, loader, optimizer)
        mine = [dataset.counts.batches - before["batches"], dataset.counts.dropped - before["dropped"], loss]
        everyone = [None] * world
        dist.all_gather_object(everyone, mine)
        if rank == 0:
            batches, dropped, losses = zip(*everyone)
            print(f"epoch {epoch}: loss {sum(losses) / world:.3f} (batches per rank {list(batches)}, "
                  f"dropped {list(dropped)})", flush=True)
    dataset.close()
    if rank == 0:  # one rank evaluates, without the others (so without even ends: even=False inside)
        print(f"held-out accuracy: {100 * accuracy(model.module, held_out(str(data.test_dir), size), device):.1f}%")
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=["zsplit", "shard"], default="zsplit")
    parser.add_argument("--world", type=int, default=2, help="number of ranks (processes)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default 5, --short 3)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--short", action="store_true", help="a small data set and 3 epochs (for tests)")
    args = parser.parse_args()
    args.epochs = args.epochs or (3 if args.short else 5)
    data, size = demo_data(args.short)  # made here once, before the ranks look for it
    port = free_port()
    sharing = (image_server(str(data.train_dir), f"zsplit://127.0.0.1:{port}", epochs=args.epochs,
                            batch_size=args.batch_size, size=size, min_consumers=args.world)
               if args.split == "zsplit" else contextlib.nullcontext())
    with sharing:
        torch.multiprocessing.spawn(rank_main, args=(args.world, free_port(), f"zjoin://127.0.0.1:{port}", args),
                                    nprocs=args.world)


if __name__ == "__main__":
    main()
