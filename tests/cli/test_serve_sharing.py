"""The server tools on the sharing schemes: serve-imagenet-dir to zshare:// and zsplit:// with
--min-consumers, consumers joining with zjoin://, tensormon --consumers watching them."""

from __future__ import annotations

import json
import subprocess
import threading

import numpy as np
import pytest
from test_serve_imagenet import CLASSES, PER_CLASS, SIZE, check_batches, finish, tool, tree  # noqa: F401

from tensorcom import Connection

pytestmark = [pytest.mark.net, pytest.mark.procs]


def serve_dir(popen, tree, url: str, *args: str) -> subprocess.Popen:  # noqa: F811
    return popen.start([*tool("serve-imagenet-dir"), "-d", str(tree), "-b", "4", "--size", str(SIZE), "-r", "0",
                        "--no-shuffle", *args, url], stderr=subprocess.PIPE, text=True)


def consume(url: str, epochs: int, results: dict, key: int) -> None:
    with Connection(url, timeout=60) as conn:
        results[key] = [[batch for batch in conn] for _ in range(epochs)]


def run_consumers(url: str, count: int, epochs: int) -> dict:
    results: dict = {}
    threads = [threading.Thread(target=consume, args=(url, epochs, results, k)) for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    return results


def test_zshare_every_consumer_gets_every_image_each_epoch(tree, popen, free_port):  # noqa: F811
    port = free_port()
    proc = serve_dir(popen, tree, f"zshare://127.0.0.1:{port}", "--epochs", "2", "--min-consumers", "2", "-P", "2")
    results = run_consumers(f"zjoin://127.0.0.1:{port}", 2, 2)
    finish(proc)
    assert sorted(results) == [0, 1]
    for epochs in results.values():
        for batches in epochs:
            labels = check_batches(batches)
            assert sorted(labels) == sorted(list(range(CLASSES)) * PER_CLASS)
    for a, b in zip(results[0], results[1]):  # the same batches, the same pixels
        for (images_a, _), (images_b, _) in zip(a, b):
            np.testing.assert_array_equal(images_a, images_b)


def test_zsplit_divides_each_epoch_between_consumers(tree, popen, free_port):  # noqa: F811
    port = free_port()
    proc = serve_dir(popen, tree, f"zsplit://127.0.0.1:{port}", "--epochs", "1", "--min-consumers", "2")
    results = run_consumers(f"zjoin://127.0.0.1:{port}", 2, 1)
    finish(proc)
    labels = [label for (batches,) in results.values() for _, labels in batches for label in labels]
    assert sorted(labels) == sorted(list(range(CLASSES)) * PER_CLASS)
    assert all(batches for (batches,) in results.values())


def test_tensormon_consumers_shows_position_lag_rate_credit(tree, popen, free_port):  # noqa: F811
    port = free_port()
    proc = serve_dir(popen, tree, f"zshare://127.0.0.1:{port}", "--epochs", "0", "-B")
    with Connection(f"zjoin://127.0.0.1:{port}", credit=2, timeout=30) as conn:
        conn.recv()
        mon = subprocess.run([*tool("tensormon"), f"zjoin://127.0.0.1:{port}", "--consumers", "--json",
                              "--count", "2", "--report", "1.5"], capture_output=True, text=True, timeout=60)
        assert mon.returncode == 0, mon.stderr
        reports = [json.loads(line) for line in mon.stdout.splitlines()]
        assert len(reports) == 2
        (consumer,) = reports[-1]
        assert consumer["name"] == conn.sender and consumer["credit"] == 2
        assert {"epoch", "pos", "lag", "samples_per_s", "free"} <= set(consumer)
    proc.kill()
