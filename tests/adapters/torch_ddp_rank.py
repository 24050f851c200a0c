"""One rank of a two-process DDP job on the CPU (gloo), for tests/adapters/test_torch_ddp.py.

    python torch_ddp_rank.py --rank R --world W --port P --out FILE --url URL

First "shards": the rank iterates its portion of Pipeline(range(13)).batch(2) (rank 0 has 4 batches, rank 1
has 3) through BatchDataset for two passes, one data-parallel training step per batch (its gradients
all-reduced over the ranks, the collective DistributedDataParallel runs in backward: a rank that
took one step more would wait for ever; plain SGD by hand: the DDP wrapper and torch.optim would import
torch._dynamo, 2 s of CPU); in a third pass rank 1's
source raises after two batches. Then "zsplit": the rank joins URL (a zsplit server) with credit 1 (rank 0)
or 6 (rank 1), so the ranks receive different counts, for two passes with a step per batch.
FILE gets one JSON object: {"shards": {"passes": [ids yielded per pass], "counts": {...}, "error": [class,
text]}, "zsplit": {"passes": ..., "counts": ...}}. (One process runs both: torch takes seconds to import.)
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist

import tensorcom
from tensorcom import Pipeline


class FailingSource:
    """Yields `good` batches of ids, then raises (a data source that breaks mid-pass)."""

    def __init__(self, good: int):
        self.good = good

    def __iter__(self):
        for i in range(self.good):
            yield {"id": [100 + i]}
        raise RuntimeError("the disk went away")


def train(dataset, model, passes: int, lr: float = 1e-4) -> list[list[int]]:
    """Run `passes` passes of `dataset`, a data-parallel step per batch (gradients averaged over the
    ranks by all_reduce); the ids each pass yielded."""
    seen = []
    for _ in range(passes):
        ids = []
        for batch in torch.utils.data.DataLoader(dataset, batch_size=None):
            x = torch.as_tensor(batch["id"], dtype=torch.float32).reshape(-1, 1)
            loss = model(x).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                for parameter in model.parameters():
                    dist.all_reduce(parameter.grad)
                    parameter -= lr * parameter.grad / dist.get_world_size()
                    parameter.grad = None
            ids += [int(i) for i in batch["id"]]
        seen.append(ids)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--url", required=True)
    args = parser.parse_args()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    dist.init_process_group("gloo", rank=args.rank, world_size=args.world)
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)  # the same start on every rank (the seed)
    result: dict = {"shards": {}, "zsplit": {}}
    portion = Pipeline(range(13)).map(lambda i: {"id": i}).batch(2).shard(args.rank, args.world)
    dataset = tensorcom.torch.BatchDataset(portion)
    result["shards"]["passes"] = train(dataset, model, 2)
    result["shards"]["counts"] = vars(dataset.counts)
    failing = tensorcom.torch.BatchDataset(FailingSource(2) if args.rank == 1 else FailingSource(5))
    try:
        train(failing, model, 1)
    except Exception as exc:
        result["shards"]["error"] = [type(exc).__name__, str(exc)]
    with tensorcom.torch.BatchDataset(args.url, credit=1 if args.rank == 0 else 6, timeout=30) as dataset:
        result["zsplit"]["passes"] = train(dataset, model, 2)
        result["zsplit"]["counts"] = vars(dataset.counts)
    dist.barrier()
    dist.destroy_process_group()
    with open(args.out, "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
