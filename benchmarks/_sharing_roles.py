"""The processes benchmarks/sharing.py starts, one role each: the training-loop stand-ins (jobs) and
the servers that are not a tensorcom command line. Run as `python benchmarks/_sharing_roles.py ROLE
[options]` by sharing.py (in the tensorsocket venv for tensorsocket's roles), never by hand.

A job prints one line `RESULT {json}` on stdout when its epoch is over (benchmarks/_processes.py
reads it). This module imports no other benchmark module: everything a role imports is CPU counted
in its setup (benchmarks/pipeline.py's imports would add ~30 ms to every process), so BATCH and SIZE
repeat pipeline.py's.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import dataclass

BATCH = 64  # = benchmarks/pipeline.py's BATCH and SIZE
SIZE = 224


# ---------------------------------------------------------------- the training-loop stand-in


@dataclass
class Step:
    """What a job does with each batch: read every byte (`touch`), then sleep `ms` milliseconds."""

    ms: float = 10.0
    touch: bool = True


class Tally:
    """A job's count of batches and images, timed from its first batch (start-up left out)."""

    def __init__(self):
        self.batches = self.images = self.first_images = 0
        self.first: float | None = None
        self.last = 0.0
        self.checksum = 0

    def take(self, images, step: Step) -> None:
        """Count one batch of `images` (array-like, (N, 224, 224, 3) uint8) and do the step's work."""
        import numpy as np

        array = np.asarray(images)
        if array.ndim != 4 or array.shape[1:] != (SIZE, SIZE, 3) or array.dtype != np.uint8:
            raise RuntimeError(f"unexpected images {array.dtype} {array.shape}")
        if step.touch:
            flat = np.ascontiguousarray(array).reshape(-1)
            self.checksum ^= int(flat.view(np.uint64).sum() if flat.size % 8 == 0 else flat.max())
        if step.ms > 0:
            time.sleep(step.ms / 1000)
        now = time.monotonic()
        if self.first is None:
            self.first, self.first_images = now, len(array)
        self.batches, self.images, self.last = self.batches + 1, self.images + len(array), now

    def report(self, **extra) -> None:
        """Print the job's one RESULT line (JSON) on stdout."""
        span = self.last - (self.first or self.last)
        rate = (self.images - self.first_images) / span if span > 0 else None
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print("RESULT " + json.dumps({"batches": self.batches, "images": self.images, "rate": rate,
                                      "first": self.first, "last": self.last,
                                      "own_cpu": usage.ru_utime + usage.ru_stime, **extra}), flush=True)


def job_pipeline(args: argparse.Namespace) -> None:
    """(a): iterate this job's own dir_pipeline(workers=W) for one epoch."""
    from tensorcom.images.imagenet import dir_pipeline

    tally = Tally()
    pipeline = dir_pipeline(args.dir, batch_size=BATCH, size=SIZE, workers=args.workers, seed=args.seed)
    for images, _labels in pipeline:
        tally.take(images, args.step)
    pipeline.close()
    tally.report()


def job_zjoin(args: argparse.Namespace) -> None:
    """(b) and the fan-out consumers: one epoch from Connection("zjoin://...")."""
    from tensorcom import Connection

    tally = Tally()
    conn = Connection(args.url, shm={"on": True, "off": False}.get(args.shm))
    for batch in conn:
        tally.take(batch[0], args.step)
    conn.close()
    tally.report()


def job_tensorsocket(args: argparse.Namespace) -> None:
    """(c): one epoch from a tensorsocket TensorConsumer (run with the tensorsocket venv's python)."""
    from tensorsocket import TensorConsumer

    ports = [int(p) for p in args.ports.split(",")]
    consumer = TensorConsumer(port=ports[0], ack_port=ports[1], heart_ports=(ports[2], ports[3]), batch_size=BATCH)
    tally = Tally()
    for images, _labels in consumer:
        tally.take(images.numpy(), args.step)
    tally.report()


# ---------------------------------------------------------------- servers run as roles of this script


class TorchBatches:
    """A tensorsocket loader: a Pipeline of [images, labels] numpy batches as (tensor, tensor), with len."""

    def __init__(self, pipeline):
        self.pipeline = pipeline

    def __len__(self) -> int:
        return len(self.pipeline)

    def __iter__(self):
        import torch

        for images, labels in self.pipeline:
            yield torch.from_numpy(images), torch.from_numpy(labels)


def tensorsocket_producer(args: argparse.Namespace) -> None:
    """(c)'s server: TensorProducer over TorchBatches(dir_pipeline(workers=W)); waits until
    args.consumers have registered (heartbeats), serves one epoch, then joins."""
    from tensorsocket import TensorProducer

    from tensorcom.images.imagenet import dir_pipeline

    ports = [int(p) for p in args.ports.split(",")]
    pipeline = dir_pipeline(args.dir, batch_size=BATCH, size=SIZE, workers=args.workers, seed=args.seed, dedicated=True)
    producer = TensorProducer(TorchBatches(pipeline), port=ports[0], ack_port=ports[1],
                              heart_ports=(ports[2], ports[3]), producer_batch_size=int(args.producer_batch))
    while len(producer.hb.consumers) < args.consumers:
        time.sleep(0.1)
    for _ in producer:
        pass
    print("RESULT " + json.dumps({"epochs": producer.epoch}), flush=True)
    producer.join()
    pipeline.close()


class RepeatBatch:
    """A picklable source: one synthetic [images uint8 (64,224,224,3), labels int32 (64,)] batch,
    made where it is iterated, yielded `count` times."""

    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        import numpy as np

        rng = np.random.default_rng(0)
        batch = [rng.integers(0, 256, (BATCH, SIZE, SIZE, 3), dtype=np.uint8), np.arange(BATCH, dtype=np.int32)]
        for _ in range(self.count):
            yield batch


def fanout_server(args: argparse.Namespace) -> None:
    """The fan-out server: tensorcom.serve of RepeatBatch(args.batches) to zshare, one epoch, one worker."""
    import tensorcom
    from tensorcom.pipeline import Pipeline

    tensorcom.serve(Pipeline(RepeatBatch(args.batches)), args.url, workers=1, epochs=1, report=None,
                    min_consumers=args.consumers)


def raw_server(args: argparse.Namespace) -> None:
    """The fan-out floor: one ZeroMQ PUB socket (no high-water mark) sends RepeatBatch's batch
    zero-copy `args.batches` times, then b"end", to `args.consumers` subscribers, which announce
    themselves on a PULL socket first (--url: the data and the hello addresses, comma-separated)."""
    import zmq

    data, hello = args.url.split(",")
    context = zmq.Context()
    pub, pull = context.socket(zmq.PUB), context.socket(zmq.PULL)
    pub.sndhwm = 0
    pub.bind(data)
    pull.bind(hello)
    for _ in range(args.consumers):
        pull.recv()
    time.sleep(0.5)  # let the last subscription reach the PUB socket
    for images, labels in RepeatBatch(args.batches):
        pub.send_multipart([labels, images], copy=False)
    pub.send(b"end")
    pub.close(linger=60_000)
    pull.close(linger=0)
    context.term()


def job_raw(args: argparse.Namespace) -> None:
    """A raw_server subscriber: says hello, then counts batches until b"end"."""
    import numpy as np
    import zmq

    data, hello = args.url.split(",")
    context = zmq.Context()
    sub, push = context.socket(zmq.SUB), context.socket(zmq.PUSH)
    sub.connect(data)
    sub.subscribe(b"")
    time.sleep(0.2)
    push.connect(hello)
    push.send(b"hello")
    tally = Tally()
    while len(message := sub.recv_multipart(copy=False)) > 1:
        tally.take(np.frombuffer(message[1].buffer, np.uint8).reshape(-1, SIZE, SIZE, 3), args.step)
    tally.report()
    sub.close(linger=0)
    push.close(linger=0)
    context.term()


ROLES = {"job-pipeline": job_pipeline, "job-zjoin": job_zjoin, "job-tensorsocket": job_tensorsocket,
         "tensorsocket-producer": tensorsocket_producer, "fanout-server": fanout_server,
         "fanout-raw-server": raw_server, "job-raw": job_raw}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="one process of benchmarks/sharing.py")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--step-ms", type=float, default=10.0, help="the job's sleep per batch, ms")
    parser.add_argument("--no-touch", dest="touch", action="store_false", help="the job does not read the bytes")
    parser.add_argument("--dir", help="the JPEG folder of dir_pipeline")
    parser.add_argument("--workers", type=int, default=2, help="dir_pipeline's worker processes")
    parser.add_argument("--seed", type=int, default=0, help="dir_pipeline's seed")
    parser.add_argument("--url", help="what to serve to or join (raw PUB: the data and the hello addresses)")
    parser.add_argument("--ports", help="tensorsocket's four ports, comma-separated")
    parser.add_argument("--consumers", type=int, default=1, help="servers: consumers to wait for")
    parser.add_argument("--batches", type=int, default=0, help="fan-out servers: batches to send")
    parser.add_argument("--shm", choices=("auto", "on", "off"), default="auto",
                        help="job-zjoin: the shared-memory handoff (auto: on when the server is on this host)")
    parser.add_argument("--producer-batch", type=int, default=8, help="tensorsocket's producer_batch_size")
    args = parser.parse_args(argv)
    args.step = Step(args.step_ms, args.touch)
    return args


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    ROLES[arguments.role](arguments)
