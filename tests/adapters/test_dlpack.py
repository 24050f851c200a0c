"""adapters/dlpack.py: array fields behind __dlpack__, imported by torch without a copy; read-only
received arrays reach consumers older than DLPack 1.0 by the `readonly` policy."""

import pickle

import numpy as np
import pytest

from tensorcom.adapters.dlpack import DLPackArray, ToDLPack, to_dlpack
from tensorcom.transport.connection import Connection


def received_like(array: np.ndarray) -> np.ndarray:
    """A read-only array over bytes, as a Connection hands out views of its frames."""
    out = np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)
    assert not out.flags.writeable
    return out


def test_array_fields_are_wrapped_and_the_rest_passes_through():
    images, labels = received_like(np.arange(24, dtype=np.uint8).reshape(2, 3, 4)), np.arange(2, dtype=np.int32)
    out = to_dlpack({"jpg": images, "cls": labels, "__key__": ["a", "b"], "n": 3, "s": np.array(["x", "y"])})
    assert isinstance(out["jpg"], DLPackArray) and out["jpg"].array is images
    assert out["jpg"].shape == (2, 3, 4) and out["jpg"].dtype == np.uint8 and out["cls"].dtype == np.int32
    assert out["__key__"] == ["a", "b"] and out["n"] == 3 and out["s"].dtype.kind == "U"
    assert out["jpg"].__dlpack_device__() == (1, 0)  # kDLCPU
    assert np.asarray(out["jpg"]) is images
    copied = np.array(out["jpg"])  # numpy's copy=True: a writable copy, as for any array
    assert copied is not images and copied.flags.writeable and np.array_equal(copied, images)
    assert isinstance(to_dlpack((labels,)), tuple) and isinstance(to_dlpack([labels]), list)


def test_bad_input():
    with pytest.raises(TypeError, match="ndarray"):
        to_dlpack(np.zeros(3))
    with pytest.raises(ValueError, match="'borrow'"):
        ToDLPack(readonly="borrow")
    with pytest.raises(TypeError, match="numpy array"):
        DLPackArray([1, 2])


def test_a_converter_pickles_and_is_reachable_as_tensorcom_dlpack():
    import tensorcom
    import tensorcom.adapters.dlpack

    converter = pickle.loads(pickle.dumps(ToDLPack(readonly="copy")))
    assert converter.readonly == "copy" and "copy" in repr(converter)
    assert tensorcom.dlpack is tensorcom.adapters.dlpack


def test_torch_imports_a_read_only_field_without_copying():
    torch = pytest.importorskip("torch")
    images = received_like(np.arange(2 * 5 * 7 * 3, dtype=np.uint8).reshape(2, 5, 7, 3))
    tensor = torch.from_dlpack(to_dlpack([images])[0])  # DLPack >= 1.0: read-only flag, numpy exports it
    assert tensor.data_ptr() == images.ctypes.data and tuple(tensor.shape) == (2, 5, 7, 3)
    assert tensor.dtype == torch.uint8 and np.array_equal(tensor.numpy(), images)


@pytest.mark.parametrize("policy,same_memory", [("share", True), ("copy", False)])
def test_an_older_consumer_gets_the_read_only_field_by_policy(policy, same_memory):
    torch = pytest.importorskip("torch")
    images = received_like(np.arange(64, dtype=np.float32).reshape(4, 16))
    field = to_dlpack([images], readonly=policy)[0]
    tensor = torch.utils.dlpack.from_dlpack(field.__dlpack__())  # an unversioned (pre-1.0) capsule
    assert (tensor.data_ptr() == images.ctypes.data) is same_memory
    assert np.array_equal(tensor.numpy(), images)
    del field, images  # the tensor keeps the memory it shares alive
    assert float(tensor.sum()) == sum(range(64))


def test_an_older_consumer_is_refused_when_asked():
    field = to_dlpack([received_like(np.zeros(4, np.float32))], readonly="refuse")[0]
    with pytest.raises(BufferError, match="readonly='share'"):
        field.__dlpack__()
    field.__dlpack__(max_version=(1, 0))  # a versioned consumer is still served


def test_a_writable_array_is_exported_as_it_is():
    torch = pytest.importorskip("torch")
    array = np.zeros(4, np.float32)
    tensor = torch.from_dlpack(DLPackArray(array, readonly="refuse"))
    tensor[0] = 5
    assert array[0] == 5


@pytest.mark.net
def test_connection_batches_reach_torch_zero_copy(free_port):
    torch = pytest.importorskip("torch")
    url = f"127.0.0.1:{free_port()}"
    images = np.arange(4 * 8 * 8 * 3, dtype=np.uint8).reshape(4, 8, 8, 3)
    with Connection(f"zpull://{url}", timeout=10, converters=ToDLPack()) as receiver, \
            Connection(f"zpush://{url}", timeout=10) as sender:
        sender.send({"images": images, "labels": np.arange(4, dtype=np.int32), "__key__": list("abcd")})
        batch = receiver.recv()
    assert isinstance(batch["images"], DLPackArray) and batch["__key__"] == list("abcd")
    x, y = torch.from_dlpack(batch["images"]), torch.from_dlpack(batch["labels"])
    assert x.data_ptr() == batch["images"].array.ctypes.data and y.data_ptr() == batch["labels"].array.ctypes.data
    assert np.array_equal(x.numpy(), images) and y.tolist() == [0, 1, 2, 3] and y.dtype == torch.int32
