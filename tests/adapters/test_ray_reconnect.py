"""tensorcom.ray across a dropped connection: two actors push to the driver's hub over tcp, and
mid-epoch the kernel resets every connection to the hub's input (`ss -K`, which needs root; skipped
elsewhere). ZeroMQ reconnects, each actor resends what the reset lost (the hub confirms what it
took; a run ends once the hub confirmed everything), the hub drops what came twice: the consumer
gets every id of both epochs exactly once, with no PeerLost and no actor counted as dead.

The actors build their pipeline from this file ("tests/adapters/test_ray_reconnect.py:make_ids"),
so this module is also imported in the actors' processes."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.net, pytest.mark.procs, pytest.mark.xdist_group("ray"),  # test_ray.py's Ray instance
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ss") is None,
                                 reason="resetting connections with `ss -K` needs root and iproute2")]

SAMPLES = 2000  # sample ids 0..1999 per epoch: 250 batches per actor, many more than the queues between
BATCH = 4  # an actor and the consumer hold, so the actors are still sending when the reset comes
PAD = 32 << 10  # bytes per sample besides its id: the actors outrun the consumer, a reset finds data in flight
RESET_AT = 20  # batches the consumer has when the connections are reset
FACTORY = f"{os.path.abspath(__file__)}:make_ids"


def padded_id(sample: int) -> dict:
    return {"id": np.int64(sample), "pad": np.zeros(PAD, np.uint8)}


def make_ids():
    """The served pipeline: ids 0..SAMPLES-1 with padding, batches of BATCH."""
    from tensorcom.pipeline import Pipeline

    return Pipeline(list(range(SAMPLES)), seed=0).map(padded_id).batch(BATCH)


def reset_connections(port: int) -> int:
    """Reset every TCP connection to or from local `port` (both ends); returns how many sockets
    the kernel closed."""
    done = subprocess.run(["ss", "-K", "-t", "-n", f"( sport = :{port} or dport = :{port} )"],
                          capture_output=True, text=True, timeout=10, check=True)
    return sum(1 for line in done.stdout.splitlines()[1:] if line.strip())


def test_a_reset_between_the_actors_and_the_hub_loses_and_repeats_nothing(ray_instance, free_port):
    from tensorcom import Connection
    from tensorcom.adapters import ray as tray

    url = f"zshare://127.0.0.1:{free_port()}"
    passes: list[list[int]] = [[], []]
    closed: list[int] = []
    with tray.start(FACTORY, url, workers=2, epochs=2, host="127.0.0.1", report=None,
                    connection_options={"liveness": 3}) as serving:  # what a reset makes unsure waits this long
        port = int(serving.hub.worker_url.rsplit(":", 1)[1])
        with Connection(serving.urls[0], credit=2, timeout=60, liveness=10) as conn:
            for epoch in range(2):
                for batch in conn:
                    passes[epoch].extend(int(i) for i in batch["id"])
                    if epoch == 0 and len(passes[0]) == RESET_AT * BATCH:
                        closed.append(reset_connections(port))
        result = serving.wait(timeout=60)
    assert closed and closed[0] >= 2  # the fault was real: the actors' connections (and the hub's ends)
    for epoch in range(2):
        assert sorted(passes[epoch]) == list(range(SAMPLES)), f"epoch {epoch}: every id once"
    assert result["restarts"] == 0 and result["batches"] == 2 * SAMPLES // BATCH
