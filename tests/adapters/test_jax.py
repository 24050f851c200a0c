"""adapters/jax.py: batches → jax arrays by jax.device_put, one pass per iteration, sharded along the
batch axis over local devices (two forced host devices: XLA reads its flags once). JAX runs in one
interpreter of its own (the `isolated` test, which runs every check), never in the test process."""

import importlib.util
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from tensorcom.adapters.jax import ToJax, batch_sharding, iterate, to_jax
from tensorcom.pipeline import Pipeline
from tensorcom.transport.connection import Connection

# jax itself is imported by the checks only: in the isolated interpreter, not in every test process that collects this
pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax not installed")


def batch(i: int, n: int = 4) -> list:
    return [np.full((n, 5, 7, 3), i, np.uint8), np.arange(n, dtype=np.int32) + 10 * i]


def check_fields_become_jax_arrays_in_the_same_container():
    import jax

    out = to_jax({"jpg": batch(1)[0], "cls": batch(1)[1], "__key__": ["a"] * 4, "n": 3, "s": np.array(["x"])})
    assert isinstance(out["jpg"], jax.Array) and out["jpg"].shape == (4, 5, 7, 3) and out["jpg"].dtype == np.uint8
    assert out["cls"].dtype == np.int32 and out["cls"].tolist() == [10, 11, 12, 13]
    assert out["__key__"] == ["a"] * 4 and out["n"] == 3 and isinstance(out["s"], np.ndarray)
    assert isinstance(to_jax(tuple(batch(0))), tuple) and isinstance(to_jax(batch(0)), list)
    device = jax.devices()[1]
    assert to_jax(batch(0), device=device)[0].devices() == {device}


def check_bad_arguments():
    import jax

    with pytest.raises(TypeError, match="ndarray"):
        to_jax(np.zeros(3))
    with pytest.raises(ValueError, match="sharding or device"):
        ToJax(batch_sharding(), jax.devices()[0])
    with pytest.raises(ValueError, match="prefetch"):
        next(iterate([batch(0)], prefetch=-1))
    with pytest.raises(ValueError, match="at least one device"):
        batch_sharding([])


def check_iterate_one_pass_of_a_pipeline_each_time():
    pipeline = Pipeline([batch(i) for i in range(5)])
    for prefetch in (0, 2, 10):
        passes = [[int(images[0, 0, 0, 0]) for images, _ in iterate(pipeline, prefetch=prefetch)] for _ in range(2)]
        assert passes == [[0, 1, 2, 3, 4]] * 2


def check_one_device_sharding_keeps_whole_batches():
    import jax

    images, labels = to_jax(batch(2), sharding=batch_sharding(jax.devices()[:1]))
    assert images.shape == (4, 5, 7, 3) and [s.data.shape for s in images.addressable_shards] == [(4, 5, 7, 3)]


def check_sharding_over_two_host_devices():
    import jax

    sharding = batch_sharding()
    out = to_jax({"x": np.arange(48, dtype=np.float32).reshape(8, 6), "y": np.arange(8, dtype=np.int32),
                  "scale": np.array(2.0, np.float32)}, sharding=sharding)
    assert len(jax.local_devices()) == 2 and sharding.mesh.axis_names == ("batch",)
    for name, shape, firsts in (("x", (4, 6), [0, 24]), ("y", (4,), [0, 4])):  # rows 0-3 on device 0, 4-7 on 1
        shards = sorted(out[name].addressable_shards, key=lambda s: s.device.id)
        assert [s.device.id for s in shards] == [0, 1] and [s.data.shape for s in shards] == [shape, shape]
        assert [int(s.data.ravel()[0]) for s in shards] == firsts
    assert out["scale"].sharding.is_fully_replicated  # rank 0: replicated
    assert float(jax.jit(lambda x: x.sum())(out["x"])) == 1128.0
    with pytest.raises(ValueError, match=r"^field 0 of shape \(5, 2\) cannot"):
        to_jax([np.zeros((5, 2), np.float32)], sharding=sharding)


def check_a_connection_pass_ends_at_its_marker(port: int):
    url = f"127.0.0.1:{port}"
    with Connection(f"zpull://{url}", timeout=10) as receiver, Connection(f"zpush://{url}", timeout=10) as sender:
        def send():
            for epoch in range(2):
                for i in range(3):
                    sender.send(batch(3 * epoch + i))
                sender.end_epoch()

        thread = threading.Thread(target=send)
        thread.start()
        passes = [[(images.dtype, images.shape, int(labels[0])) for images, labels in iterate(receiver)]
                  for _ in range(2)]
        thread.join()
    assert passes == [[(np.uint8, (4, 5, 7, 3), 10 * i) for i in range(3)],
                      [(np.uint8, (4, 5, 7, 3), 10 * i) for i in range(3, 6)]]


@pytest.mark.net
@pytest.mark.isolated
def test_the_adapter_over_two_host_devices(monkeypatch, free_port):
    """Every check above, in the one interpreter this test has (`isolated`), with two forced host
    devices: XLA reads its flags when JAX first starts its CPU backend, after this sets them."""
    import jax

    monkeypatch.setenv("XLA_FLAGS", f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2")
    jax.config.update("jax_platforms", "cpu")
    assert len(jax.devices()) == 2, "JAX's CPU backend started before XLA_FLAGS was set"
    check_fields_become_jax_arrays_in_the_same_container()
    check_bad_arguments()
    check_iterate_one_pass_of_a_pipeline_each_time()
    check_one_device_sharding_keeps_whole_batches()
    check_sharding_over_two_host_devices()
    check_a_connection_pass_ends_at_its_marker(free_port())


def test_without_jax_the_error_names_the_extra():
    code = textwrap.dedent("""
        import sys
        sys.modules["jax"] = None
        import numpy as np, tensorcom
        tensorcom.jax  # the adapter itself imports without jax
        try:
            tensorcom.jax.to_jax([np.zeros(2)])
        except tensorcom.MissingDependency as exc:
            print(exc, exc.extra)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "needs jax: pip install 'tensorcom[jax]' jax"
