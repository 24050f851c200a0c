"""Scaling benchmark: the image pipeline served by Ray actors against the same pipeline served by
`tensorcom.serve` on this machine, then fan-in of many servers into one consumer, then a model of how
many augmentation machines a trainer needs and where the next bottleneck appears.

Part 1, in one run (interleaved, best of --repeats): serve-imagenet-dir's pipeline (dir_pipeline:
RandomResizedCrop(224) + flip, batch 64, uint8; the JPEG folder of benchmarks/pipeline.py under
bench-data/) served to one consumer in this process (Connection("zjoin://…") over loopback) through a
zsplit sharing server in this process, by
  (a) tensorcom.serve(pipeline, "zsplit://…", workers=W): W spawned worker processes;
  (b) tensorcom.ray.serve(pipeline, "zsplit://…", workers=W): W Ray actors (a local Ray instance,
      ray.init(num_cpus=2), started once before the runs), pushing to the hub's tcp input;
for W = 1 and 2. Printed: img/s and CPU ms per image in steady state (from the consumer's batch 2W,
when every worker has started, to its last batch) and CPU ms per image in all (start-up included),
each counting every process of the setup: this process, its children and all their descendants
alive (so Ray's gcs_server, raylet, idle workers and actors) from /proc, plus reaped children
(benchmarks/_processes.py's tree_cpu); and the ratios (b)/(a).

Part 2: fan-in. F = 2, 4, 8 sender processes each pushing 9.6 MB batches ([uint8 (64,224,224,3),
int32 (64,)], pre-built, zero-copy) to one consumer over loopback tcp, (d) straight into a Connection
that binds zpull, (e) through a sharing server in another process (a Hub with a tcp input: the layout
tensorcom.ray uses) to a zjoin consumer; the consumer's batches/s, GB/s and CPU ms per batch, and the
ratios (e)/(d) for each F.

Part 3: the model (printed, with its inputs): augmentation cores and machines for a trainer of T img/s
from part 1's CPU per image, against the trainer's ingest (T x 150.5 KB/s) and its limits: the
receiving Connection (--ingest-gbps, docs/benchmarks.md), the NIC (--nic-gbit), and part 2's fan-in.

    ./run bench benchmarks/scaling.py --quick     # ~3 minutes
    ./run bench benchmarks/scaling.py             # ~8 minutes
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, HERE)

from _processes import tree_cpu, wait_gone  # benchmarks/_processes.py

from pipeline import BATCH, SIZE, check_batch, free_port, make_dataset  # benchmarks/pipeline.py
from transport import SHAPES as FAN_SHAPES  # benchmarks/transport.py: its batch and CPU clock
from transport import make_batch, process_cpu

IMAGE_BYTES = SIZE * SIZE * 3 + 4  # one served image: uint8 HxWx3 and its int32 label
FAN_BYTES = int(np.prod(FAN_SHAPES[0])) + 4 * FAN_SHAPES[1][0]  # one fan-in batch: uint8 images, int32 labels


# ---------------------------------------------------------------- part 1: the image pipeline


class Consumer(threading.Thread):
    """Joins `url` and takes one pass of [images, labels] batches. The steady state starts once
    `skip` batches have arrived (every worker has started: its start-up is not in it) and ends with
    the last batch; the consumer notes the time and the setup's CPU (tree_cpu) at both ends."""

    def __init__(self, url: str, skip: int):
        super().__init__(daemon=True)
        self.url, self.skip, self.images, self.batches, self.error = url, skip, 0, 0, None
        self.first = self.last = self.cpu_first = self.cpu_last = 0.0
        self.first_images = 0

    def run(self) -> None:
        from tensorcom import Connection

        try:
            with Connection(self.url, credit=4, timeout=180) as conn:
                for images, labels in conn:
                    self.images += check_batch(images, labels)
                    self.batches += 1
                    if self.batches == self.skip:
                        self.first, self.cpu_first, self.first_images = time.perf_counter(), tree_cpu(), self.images
                    self.last, self.cpu_last = time.perf_counter(), tree_cpu()
        except BaseException as exc:  # reported by the run
            self.error = exc


def serve_once(kind: str, workers: int, root: str) -> dict:
    """One epoch of the pipeline served by `kind` ("serve" or "ray") with `workers`, to one consumer."""
    import tensorcom
    from tensorcom.images.imagenet import dir_pipeline

    pipeline = dir_pipeline(root, batch_size=BATCH, size=SIZE, workers=0, seed=0, dedicated=True)
    port = free_port()
    consumer = Consumer(f"zjoin://127.0.0.1:{port}", skip=2 * workers)
    cpu0, t0 = tree_cpu(), time.perf_counter()
    consumer.start()
    url = f"zsplit://127.0.0.1:{port}"
    if kind == "ray":  # the actors' CPU is read before they are killed, and they are gone before the next run
        with tensorcom.ray.start(pipeline, url, workers=workers, epochs=1, host="127.0.0.1", report=None) as serving:
            serving.wait()
            cpu1, actors = tree_cpu(), [m.pid for m in serving.members]
        wait_gone(actors)
    else:  # its workers are reaped (RUSAGE_CHILDREN) when it returns
        tensorcom.serve(pipeline, url, workers=workers, epochs=1, report=None)
        cpu1 = tree_cpu()
    consumer.join()
    if consumer.error is not None:
        raise consumer.error
    wall, cpu = time.perf_counter() - t0, cpu1 - cpu0
    steady = consumer.images - consumer.first_images
    span = consumer.last - consumer.first
    result = {"kind": kind, "workers": workers, "images": consumer.images, "wall": wall,
              "rate": steady / span if span > 0 else float("nan"),
              "steady_ms": 1000 * (consumer.cpu_last - consumer.cpu_first) / max(steady, 1),
              "total_ms": 1000 * cpu / max(consumer.images, 1)}
    print(f"  {kind} W={workers}: {consumer.images} images in {wall:.1f} s, {result['rate']:.0f} img/s steady, "
          f"{result['steady_ms']:.2f} CPU ms/img steady, {result['total_ms']:.2f} in all", flush=True)
    return result


def compare_serving(root: str, repeats: int, workers: list[int]) -> dict:
    """Per (kind, W), the best of `repeats` interleaved runs in each column: the highest img/s, the
    lowest CPU per image (the machine is shared: others' load only ever makes them worse)."""
    best: dict = {}
    for _ in range(repeats):
        for w in workers:
            for kind in ("serve", "ray"):
                result, key = serve_once(kind, w, root), (kind, w)
                old = best.get(key, result)
                best[key] = {**result, "rate": max(result["rate"], old["rate"]),
                             "steady_ms": min(result["steady_ms"], old["steady_ms"]),
                             "total_ms": min(result["total_ms"], old["total_ms"])}
    return best


def serving_table(best: dict, workers: list[int]) -> str:
    head = ("| W | served by | img/s | CPU ms/img (steady) | CPU ms/img (with start-up) | img/s ray/serve "
            "| CPU/img ray/serve (steady) |")
    lines = [head, "|---:|---|---:|---:|---:|---:|---:|"]
    for w in workers:
        base = best[("serve", w)]
        for kind, name in (("serve", f"tensorcom.serve, {w} process(es)"), ("ray", f"tensorcom.ray, {w} actor(s)")):
            row = best[(kind, w)]
            ratios = (f"{row['rate'] / base['rate']:.2f} | {row['steady_ms'] / base['steady_ms']:.3f}" if kind == "ray"
                      else "1.00 | 1.000")
            lines.append(f"| {w} | {name} | {row['rate']:.0f} | {row['steady_ms']:.2f} | {row['total_ms']:.2f} | "
                         f"{ratios} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- part 2: fan-in


def fan_sender(url: str, count: int) -> None:
    """Process body: push the pre-built batch `count` times, zero-copy."""
    from tensorcom import Connection

    batch = make_batch()
    conn = Connection(url, sndhwm=4)
    for _ in range(count):
        conn.send(batch, copy=False)
    conn.close(linger=120)


def fan_hub(url: str, worker_url, mark, done, cpu) -> None:
    """Process body: a sharing server for `url` whose tcp input (sent back in `worker_url`) the senders
    push to, until `done`; `cpu.value` gets its CPU seconds from `mark` (the timed part) to `done`."""
    from tensorcom.transport.sharing.hub import Hub

    hub = Hub(url, input_host="127.0.0.1", replay=4)
    worker_url.put(hub.worker_url)
    mark.wait(600)
    start = process_cpu()
    done.wait(600)
    cpu.value = process_cpu() - start
    hub.abort()


def fan_in_once(fan: int, mode: str, total: int) -> dict:
    """`fan` senders, `total` batches in all, into one consumer (mode "direct" or "hub")."""
    from tensorcom import Connection

    ctx = multiprocessing.get_context("spawn")
    port, each = free_port(), -(-total // fan)
    mark, done, cpu, hub = ctx.Event(), ctx.Event(), ctx.Value("d", 0.0), None
    if mode == "direct":
        consumer, target = Connection(f"zpull://127.0.0.1:{port}", rcvhwm=4, timeout=120), f"zpush://127.0.0.1:{port}"
    else:
        queue = ctx.Queue()
        hub = ctx.Process(target=fan_hub, args=(f"zsplit://127.0.0.1:{port}", queue, mark, done, cpu))
        hub.start()
        target = queue.get(timeout=60)
        consumer = Connection(f"zjoin://127.0.0.1:{port}", credit=4, timeout=120)
    senders = [ctx.Process(target=fan_sender, args=(target, each)) for _ in range(fan)]
    for proc in senders:
        proc.start()
    warmup = min(2 * fan, total // 4)
    try:
        for _ in range(warmup):
            consumer.recv()
        mark.set()
        before, start = process_cpu(), time.perf_counter()
        for _ in range(each * fan - warmup):
            consumer.recv()
        seconds, used = time.perf_counter() - start, process_cpu() - before
        done.set()
    finally:
        consumer.close()
        mark.set()
        done.set()
        for proc in senders + ([hub] if hub else []):
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    timed = each * fan - warmup
    rate = timed / seconds
    result = {"fan": fan, "mode": mode, "rate": rate, "gbps": rate * FAN_BYTES / 1e9,
              "cpu_ms": 1000 * used / timed}
    result["hub_ms"] = 1000 * cpu.value / timed if hub else float("nan")
    print(f"  fan-in {fan} {mode}: {rate:.1f} batches/s, {result['gbps']:.2f} GB/s, consumer {result['cpu_ms']:.2f} "
          f"CPU ms/batch, hub {result['hub_ms']:.2f}", flush=True)
    return result


def fan_in_table(results: dict, fans: list[int]) -> str:
    lines = [f"| senders | into | batches/s | GB/s | consumer CPU ms/batch | hub CPU ms/batch | GB/s vs {fans[0]} "
             "senders |", "|---:|---|---:|---:|---:|---:|---:|"]
    modes = (("direct", "zpull Connection (direct)"), ("hub", "sharing server -> zjoin (tensorcom.ray's path)"))
    for mode, name in modes:
        base = results[(fans[0], mode)]["gbps"]
        for fan in fans:
            row = results[(fan, mode)]
            hub = "—" if math.isnan(row["hub_ms"]) else f"{row['hub_ms']:.2f}"
            lines.append(f"| {fan} | {name} | {row['rate']:.1f} | {row['gbps']:.2f} | {row['cpu_ms']:.2f} | {hub} | "
                         f"{row['gbps'] / base:.2f} |")
    lines += ["", "| senders | GB/s hub/direct | consumer CPU ms/batch hub/direct |", "|---:|---:|---:|"]
    for fan in fans:
        hub, direct = results[(fan, "hub")], results[(fan, "direct")]
        lines.append(f"| {fan} | {hub['gbps'] / direct['gbps']:.2f} | {hub['cpu_ms'] / direct['cpu_ms']:.2f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- part 3: the model


def model(ms_per_image: float, fan: dict | None, args: argparse.Namespace) -> str:
    """For trainers of several img/s: augmentation cores and machines, the trainer's ingest, and how
    much of each limit it uses: the NIC, a receiving Connection (docs/benchmarks.md), and from part 2
    one core of the consumer and one sharing server (the driver's hub: one thread relays everything)."""
    per_core = 1000 / ms_per_image
    limits = [(f"NIC {args.nic_gbit:g} Gbit/s", args.nic_gbit / 8), ("Connection receive", args.ingest_gbps)]
    note = ""
    if fan:
        batch_gb = FAN_BYTES / 1e9
        consumer_ms = max(r["cpu_ms"] for r in fan.values())
        hub_ms = max(r["hub_ms"] for (_, mode), r in fan.items() if mode == "hub")
        limits += [("consumer core", batch_gb / consumer_ms * 1e3), ("hub core", batch_gb / hub_ms * 1e3)]
        note = (f"; consumer {consumer_ms:.2f} and hub {hub_ms:.2f} CPU ms per 9.6 MB batch (worst fan-in of part 2) "
                f"= {limits[2][1]:.2f} and {limits[3][1]:.2f} GB/s per core")
    inputs = (f"inputs: {ms_per_image:.2f} CPU ms per image (tensorcom.ray, steady) = {per_core:.0f} img/s per core; "
              f"{IMAGE_BYTES / 1e3:.1f} KB per served image; machines of {args.cores} cores, {args.usable:.0%} of them "
              f"augmenting; Connection receive {args.ingest_gbps:.2f} GB/s (docs/benchmarks.md){note}")
    lines = [inputs, "",
             "| trainer img/s | augmentation cores | machines | ingest GB/s | " +
             " | ".join(f"{name} used" for name, _ in limits) + " | first limit |",
             "|---:|---:|---:|---:|" + "---:|" * len(limits) + "---|"]
    for rate in args.rates:
        cores = rate / per_core
        ingest = rate * IMAGE_BYTES / 1e9
        used = [ingest / limit for _, limit in limits]
        worst = max(range(len(limits)), key=lambda i: used[i])
        lines.append(f"| {rate:,} | {cores:.0f} | {math.ceil(cores / (args.cores * args.usable))} | {ingest:.2f} | " +
                     " | ".join(f"{u:.0%}" for u in used) + f" | {limits[worst][0] if used[worst] >= 1 else '—'} |")
    name, smallest = min(limits, key=lambda limit: limit[1])
    lines.append(f"\nfirst limit past compute: {name}, at ~{smallest * 1e9 / IMAGE_BYTES:,.0f} img/s into one trainer")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run")
    parser.add_argument("--images", type=int, default=None, help="images in the folder (default 3000, quick 640)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved runs, best kept (default 2, quick 1)")
    parser.add_argument("--fan", default="2,4,8", help="sender counts for fan-in")
    parser.add_argument("--batches", type=int, default=None, help="fan-in batches per run (default 240, quick 80)")
    parser.add_argument("--ingest-gbps", type=float, default=4.06,
                        help="a Connection's receive rate, GB/s (docs/benchmarks.md, tcp, v2 multipart, quiet)")
    parser.add_argument("--nic-gbit", type=float, default=25.0, help="trainer NIC, Gbit/s")
    parser.add_argument("--cores", type=int, default=32, help="cores per augmentation machine")
    parser.add_argument("--usable", type=float, default=0.85, help="share of those cores for augmentation")
    parser.add_argument("--rates", type=lambda s: [int(x) for x in s.split(",")],
                        default=[2000, 5000, 10000, 20000, 40000], help="trainer img/s to model")
    parser.add_argument("--skip-fan-in", action="store_true")
    args = parser.parse_args(argv)
    count = args.images or (640 if args.quick else 3000)
    repeats = args.repeats or (1 if args.quick else 2)
    root = str(make_dataset(count) / "train")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"{count} JPEGs in {root}; batch {BATCH}, {SIZE}x{SIZE} uint8; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; Ray {ray.__version__}", flush=True)
    workers = [1, 2]
    try:
        best = compare_serving(root, repeats, workers)
    finally:
        ray.shutdown()
    print("\n" + serving_table(best, workers))
    overhead = max(best[("ray", w)]["steady_ms"] / best[("serve", w)]["steady_ms"] - 1 for w in workers)
    print(f"\nRay's CPU per image over tensorcom.serve's, worst W: {overhead:+.1%} (target <= +5%)")
    fans = [int(f) for f in args.fan.split(",")]
    fan_results = None
    if not args.skip_fan_in:
        print(flush=True)
        total = args.batches or (80 if args.quick else 240)
        fan_results = {(f, m): fan_in_once(f, m, total) for f in fans for m in ("direct", "hub")}
        print("\n" + fan_in_table(fan_results, fans))
    print("\n" + model(max(best[("ray", w)]["steady_ms"] for w in workers), fan_results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
