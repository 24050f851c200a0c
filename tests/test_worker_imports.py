"""What a spawned worker imports: its entry modules, seen from a fresh interpreter (tests/fresh.py).

A portion or map worker (tensorcom.pipeline.processes running a pickled Pipeline) and a serving
worker (tensorcom.pipeline.serving's serve_portions, sending on a Connection) import their entry
modules at every start; what those load and the worker never uses is start-up time paid again by
each worker, each autoscaled worker and each test that starts a server."""

import pytest
from fresh import loaded_by

import tensorcom.shards
import tensorcom.transport.ends

NETWORK_CLIENTS = ("http.client", "urllib.request", "email", "ssl", "tarfile", "asyncio", "zmq", "zmq.asyncio")


def resolves_lazily(package) -> None:
    """Every public name of `package` (imported on first use) resolves; an unknown one is an AttributeError."""
    for name in package.__all__:
        assert getattr(package, name) is not None and name in dir(package)
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        package.nonesuch


def test_a_pipeline_worker_loads_no_network_client_nor_the_shard_readers_and_writers():
    # importing one shards submodule (the decoder a decode stage pickles) runs a light package __init__
    assert loaded_by("import tensorcom.shards, tensorcom.shards.fields, tensorcom.pipeline.processes, "
                     "tensorcom.pipeline._portions, tensorcom.pipeline._pipeline",
                     (*NETWORK_CLIENTS, "tensorcom.shards._tarstream", "tensorcom.shards.writers")) == []
    resolves_lazily(tensorcom.shards)
    assert tensorcom.shards.OPEN_OPTIONS and callable(tensorcom.shards.epoch_shards)


def test_the_process_owner_leaves_numpy_to_the_work():
    # a map worker over plain objects needs no numpy: only the parent's reading side of a pipe does
    assert loaded_by("import tensorcom.pipeline.processes", ("numpy", "tensorcom.tenbin")) == []


def test_a_serving_worker_loads_no_asyncio_nor_the_sharing_protocol_nor_an_http_server():
    # a worker sends on a plain Connection: the sharing ends open the protocol (asyncio with it) when used;
    # the metrics endpoint is the parent's, CURVE key files are read only where keys are used
    assert loaded_by("import tensorcom.pipeline.serving, tensorcom.transport.connection",
                     ("asyncio", "zmq.asyncio", "tensorcom.transport.sharing", "http.server", "http.client",
                      "zmq.auth", "logging")) == []
    resolves_lazily(tensorcom.transport.ends)
