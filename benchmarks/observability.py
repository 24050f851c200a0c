"""What observability costs: the pipeline benchmark's served case with everything on vs everything off.

On the ImageNet-like folder of benchmarks/pipeline.py (its make_dataset: 500x375 JPEGs, RandomResizedCrop(224)
+ flip, batch 64, uint8), serve-imagenet-dir -P 2 (a real subprocess) -> zpush -> a Connection binding
zpull here, in two settings, interleaved (off, on, off, on, ...) in the same run:

  off  --no-timing, no metrics endpoint
  on   stage timing (the default) and --metrics 127.0.0.1:0, with a scraper thread here fetching /metrics
       and /status.json once a second from the moment the server prints the endpoint; the consumer
       reads the end of the stream only once a fetch has found the stages (the server waits for its
       consumer to read everything before it exits, so even a one-batch run is scraped with them)

The consumer's data wait (two clock readings per batch in every receiving Connection) is measured in
both: it is always on. No tensormon-like observer runs: over zpush there is no sharing server whose
consumer table or server report it could read; the scraper reads the same figures it would show.

Each run reports img/s (counted from the first batch, as benchmarks/pipeline.py's Timer does) and the
server's CPU seconds per image: the user + system time of the server process and its publishers
(resource.getrusage(RUSAGE_CHILDREN) around the run: the server is this process's only child then,
and it reaps its publishers before it exits). The table gives the median of --repeats runs of each
setting and the on/off ratios, against the target: within 2% (img/s ratio >= 0.98, CPU ratio <= 1.02).

    ./run bench benchmarks/observability.py            # 3000 images, 5 runs of each (a few minutes)
    ./run bench benchmarks/observability.py --quick    # 640 images, 3 runs of each (< 2 minutes)
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pipeline as bench  # noqa: E402  (benchmarks/pipeline.py: the folder, its checks, the timer)
from _processes import descendants, proc_table  # noqa: E402  (benchmarks/_processes.py)

SETTINGS = {"off": ["--no-timing"], "on": ["--metrics", "127.0.0.1:0"]}
ENDPOINT = re.compile(r"metrics at (http://\S+?/metrics)")
TARGET = 0.02  # on within 2% of off


def children_cpu() -> float:
    """User + system CPU seconds of this process's reaped descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds so far of process `pid` and its descendants, live or reaped
    (benchmarks/_processes.py's /proc table: each row counts the children it reaped, publishers done)."""
    rows = proc_table()
    return sum(row.cpu for row in rows if row.pid == pid) + sum(row.cpu for row in descendants(pid, rows))


class Scraper:
    """Reads the server's stderr (kept for errors); once it names the metrics endpoint, fetches
    /metrics and /status.json every `every` seconds (and at once when `confirm` asks) until stopped.
    `scrapes`: fetches that answered; `stages`: the stage names any /status.json gave, in the order
    they first appeared; `saw_stages`: set once a fetch found stages."""

    def __init__(self, stderr, every: float = 1.0):
        self.stderr, self.every = stderr, every
        self.lines: list[str] = []
        self.scrapes, self.stages = 0, []
        self.url: str | None = None
        self.stop, self.wake, self.saw_stages = threading.Event(), threading.Event(), threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.poller = threading.Thread(target=self._poll, daemon=True)
        self.reader.start()
        self.poller.start()

    def _read(self) -> None:
        for line in self.stderr:
            self.lines.append(line)
            found = ENDPOINT.search(line)
            if found and self.url is None:
                self.url = found.group(1)[: -len("metrics")]
                self.wake.set()

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.wake.clear()
            if self.url is not None:
                self._scrape()
            self.wake.wait(self.every if self.url is not None else 0.05)

    def _scrape(self) -> None:
        try:
            with urllib.request.urlopen(self.url + "metrics", timeout=5) as answer:
                answer.read()
            with urllib.request.urlopen(self.url + "status.json", timeout=5) as answer:
                stages = list(json.load(answer).get("stages") or {})
        except OSError:  # the server is closing its endpoint
            return
        self.scrapes += 1
        self.stages += [name for name in stages if name not in self.stages]
        if stages:
            self.saw_stages.set()

    def confirm(self, timeout: float = 60.0) -> bool:
        """Wait until a fetch has found stages (asking for one now); False after `timeout` seconds.
        The consumer calls it before it reads the end of the stream: the server, which waits for its
        consumer to read everything before it exits, still answers then."""
        deadline = time.monotonic() + timeout
        while not self.saw_stages.is_set() and time.monotonic() < deadline:
            self.wake.set()
            self.saw_stages.wait(min(self.every, max(deadline - time.monotonic(), 0)))
        return self.saw_stages.is_set()

    def close(self) -> None:
        self.stop.set()
        self.wake.set()
        self.poller.join(timeout=10)
        self.reader.join(timeout=10)


def run_served(root: Path, setting: str, expected: int, publishers: int = 2) -> dict:
    """One run of serve-imagenet-dir -P `publishers` over `root` (`expected` images) with SETTINGS[setting]:
    images, img/s (from the first batch), the server tree's CPU seconds per image over the whole run
    (start-up included) and while it streams (from the first batch to the `expected`-th image; the
    images of the first batch left out, as for the rate), and (on) the scrapes that answered."""
    from tensorcom import Connection

    port = bench.free_port()
    command = [sys.executable, "-m", "tensorcom.cli.serve_imagenet", "dir", "-d", str(root), "-b", str(bench.BATCH),
               "--size", str(bench.SIZE), "-P", str(publishers), "--epochs", "1", "-r", "0", *SETTINGS[setting],
               f"zpush://127.0.0.1:{port}"]
    timer = bench.Timer()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=120) as conn:
        cpu = children_cpu()
        server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        scraper = Scraper(server.stderr)
        streaming = [0.0, 0.0]  # the tree's CPU seconds at the first batch and at the last image
        try:
            for images, labels in conn:
                timer.tick(bench.check_batch(images, labels))
                if timer.images == timer.first_images or timer.images == expected:
                    streaming[timer.images == expected] = tree_cpu(server.pid)
                if timer.images == expected and setting == "on" and not scraper.confirm():
                    raise RuntimeError("no scrape of the metrics endpoint found the stages:\n" + "".join(scraper.lines))
            server.wait(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
            scraper.close()
        cpu = children_cpu() - cpu
    if server.returncode != 0:
        raise RuntimeError(f"serve-imagenet-dir ({setting}) exited with {server.returncode}:\n{''.join(scraper.lines)}")
    if setting == "on" and not scraper.scrapes:
        raise RuntimeError("the metrics endpoint never answered:\n" + "".join(scraper.lines))
    if timer.images != expected:
        raise RuntimeError(f"{timer.images} images received, {expected} in the folder")
    result = {"setting": setting, "images": timer.images, "rate": timer.rate(), "cpu_per_image": cpu / timer.images,
              "streaming_cpu_per_image": (streaming[1] - streaming[0]) / max(timer.images - timer.first_images, 1),
              "scrapes": scraper.scrapes, "stages": scraper.stages}
    print(f"  {setting}: {timer.images} images, {result['rate']:.0f} img/s, server CPU ms per image "
          f"{1000 * result['cpu_per_image']:.2f} in all, {1000 * result['streaming_cpu_per_image']:.2f} streaming"
          + (f", {scraper.scrapes} scrapes, stages {', '.join(scraper.stages)}" if setting == "on" else ""), flush=True)
    return result


def compare(root: Path, repeats: int, expected: int, publishers: int = 2) -> dict[str, list[dict]]:
    """`repeats` rounds of (off, on), interleaved so that the machine's load drifts over both."""
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for _ in range(repeats):
        for setting in runs:
            runs[setting].append(run_served(root, setting, expected, publishers))
    return runs


def table(runs: dict[str, list[dict]], publishers: int = 2) -> str:
    """The medians of each setting and the on/off ratios against the 2% target, as a Markdown table."""
    def median(setting: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[setting])

    keys = ("rate", "streaming_cpu_per_image", "cpu_per_image")
    names = {"off": "off: --no-timing, no metrics", "on": "on: timing, --metrics scraped every second"}
    lines = [f"| serve-imagenet-dir -P {publishers} -> Connection | runs | img/s | server CPU ms/image, streaming "
             "| server CPU ms/image, whole run |", "|---|---:|---:|---:|---:|"]
    for setting, name in names.items():
        rate, streaming, whole = (median(setting, key) for key in keys)
        lines.append(f"| {name} | {len(runs[setting])} | {rate:.0f} | {1000 * streaming:.2f} | {1000 * whole:.2f} |")
    ratios = [median("on", key) / median("off", key) for key in keys]
    verdicts = [ratios[0] >= 1 - TARGET, ratios[1] <= 1 + TARGET, ratios[2] <= 1 + TARGET]
    targets = [f">= {1 - TARGET:.2f}", f"<= {1 + TARGET:.2f}", f"<= {1 + TARGET:.2f}"]
    lines.append("| on / off (target: within 2%) | | " + " | ".join(
        f"{ratio:.3f} ({'met' if met else 'missed'}: {target})" for ratio, met, target in zip(ratios, verdicts, targets))
        + " |")
    return "\n".join(lines) + "\n\n(medians of the runs of each setting)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run: 640 images, 3 runs of each setting")
    parser.add_argument("--images", type=int, default=None, help="images in the folder (default 3000, quick 640)")
    parser.add_argument("--repeats", type=int, default=None, help="runs of each setting, interleaved (default 5, quick 3)")
    parser.add_argument("--publishers", type=int, default=2, help="serve-imagenet-dir -P (default 2, as benchmarks/pipeline.py)")
    parser.add_argument("--data", type=Path, default=None, help="where the folder is made (default: bench-data/)")
    args = parser.parse_args(argv)
    if args.data is not None:
        bench.DATA = args.data  # make_dataset writes under it
    count = args.images or (640 if args.quick else 3000)
    repeats = args.repeats or (3 if args.quick else 5)
    root = bench.make_dataset(count)
    expected = len(bench.image_files(root))
    print(f"{expected} JPEGs in {root}; serve-imagenet-dir -P {args.publishers}, batch {bench.BATCH}; {repeats} runs of each setting, "
          "interleaved", flush=True)
    print("\n" + table(compare(root, repeats, expected, args.publishers), args.publishers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
