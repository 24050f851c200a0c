"""adapters/torch.py: batches → torch tensors by declaration (ToTorch / to_torch), never by shape; on a
device: pinned and copied with non_blocking to CUDA, no CUDA call for the CPU, a clear error without CUDA.
(This machine has no GPU: the CUDA path is checked by recording what torch is asked to do.)"""

import pickle
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tensorcom.adapters.torch import ToTorch, to_torch
from tensorcom.transport.connection import Connection


def nhwc_images(n=4, h=5, w=7):
    """uint8 (n, h, w, 3) whose values tell the axes apart."""
    return np.arange(n * h * w * 3, dtype=np.int64).reshape(n, h, w, 3).astype(np.uint8)


def test_an_undeclared_field_is_never_transposed():
    points = np.random.default_rng(0).random((8, 16, 3)).astype(np.float32)  # (B, L, 3): not an image
    boxes = np.zeros((8, 2, 4, 4), np.float64)  # rank 4, last axis 4: not an image either
    out = to_torch([nhwc_images(8), points, boxes], images={0: "NHWC"})
    assert tuple(out[1].shape) == (8, 16, 3) and out[1].dtype == torch.float32
    assert np.array_equal(out[1].numpy(), points)
    assert tuple(out[2].shape) == (8, 2, 4, 4) and out[2].dtype == torch.float64
    assert tuple(to_torch([points])[0].shape) == (8, 16, 3)  # nothing declared: nothing moves


def test_a_declared_nhwc_uint8_field_becomes_nchw_when_asked():
    images = nhwc_images()
    out = to_torch({"jpg": images, "cls": np.arange(4, dtype=np.int32)}, images={"jpg": "NHWC"}, layout="NCHW")
    assert tuple(out["jpg"].shape) == (4, 3, 5, 7) and out["jpg"].dtype == torch.uint8
    assert np.array_equal(out["jpg"].numpy(), images.transpose(0, 3, 1, 2))
    assert out["jpg"].data_ptr() == images.ctypes.data  # a view of the received data, no copy
    assert out["jpg"].is_contiguous(memory_format=torch.channels_last)
    assert out["cls"].dtype == torch.int32  # undeclared fields keep their dtype (0.1 widened to int64)


def test_dtype_applies_to_images_only():
    out = to_torch([nhwc_images(), np.zeros(4, np.int16)], images={0: "NHWC"}, dtype="float32")
    assert out[0].dtype == torch.float32 and tuple(out[0].shape) == (4, 3, 5, 7)
    assert out[1].dtype == torch.int16
    assert to_torch([nhwc_images()], images={0: "NHWC"}, dtype=torch.float16)[0].dtype == torch.float16


def test_other_layouts():
    images = nhwc_images()
    assert tuple(to_torch([images], images={0: "NHWC"}, layout=None)[0].shape) == (4, 5, 7, 3)
    nchw = np.ascontiguousarray(images.transpose(0, 3, 1, 2))
    back = to_torch([nchw], images={0: "NCHW"}, layout="NHWC")[0]
    assert np.array_equal(back.numpy(), images)
    single = to_torch([images[0]], images={0: "HWC"})[0]
    assert tuple(single.shape) == (3, 5, 7) and np.array_equal(single.numpy(), images[0].transpose(2, 0, 1))
    assert tuple(to_torch([nchw[0]], images={0: "CHW"}, layout="NHWC")[0].shape) == (5, 7, 3)


def test_plain_values_lists_and_containers_pass_through():
    batch = ({"__key__": ["a", "b"], "n": 3, "s": np.array(["x", "y"]), "t": torch.zeros(2)})
    out = to_torch(batch)
    assert out["__key__"] == ["a", "b"] and out["n"] == 3 and out["s"] is batch["s"]
    assert isinstance(to_torch((np.zeros(2),)), tuple) and isinstance(to_torch([np.zeros(2)]), list)


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="'jpg'"):
        to_torch({"png": nhwc_images()}, images={"jpg": "NHWC"})
    with pytest.raises(ValueError, match=r"declared NHWC but has shape \(5, 7, 3\)"):
        to_torch([nhwc_images()[0]], images={0: "NHWC"})
    with pytest.raises(ValueError, match="'NWHC'"):
        ToTorch({0: "NWHC"})
    with pytest.raises(ValueError, match="'CHW'"):
        ToTorch({0: "NHWC"}, layout="CHW")
    with pytest.raises(TypeError, match="images must be a dict"):
        ToTorch([0])
    with pytest.raises(ValueError, match="'flaot32'"):
        ToTorch({0: "NHWC"}, dtype="flaot32")
    with pytest.raises(TypeError, match="dtype"):
        ToTorch({0: "NHWC"}, dtype=np.float32)
    with pytest.raises(TypeError, match="ndarray"):
        ToTorch()(nhwc_images())


def test_a_converter_pickles_for_dataloader_workers():
    converter = pickle.loads(pickle.dumps(ToTorch({"jpg": "NHWC"}, dtype="float32")))
    assert converter.images == {"jpg": "NHWC"} and converter.dtype == torch.float32
    assert "NHWC" in repr(converter)


def test_reachable_as_tensorcom_torch():
    import tensorcom
    import tensorcom.adapters.torch

    assert tensorcom.torch is tensorcom.adapters.torch and tensorcom.torch.ToTorch is ToTorch


@pytest.mark.net
def test_connection_converts_by_declaration():
    points = np.ones((4, 16, 3), np.float32)
    with Connection("zrpull+inproc://adapter-torch", timeout=10,
                    converters=ToTorch(images={0: "NHWC"})) as receiver, \
            Connection("zrpush+inproc://adapter-torch", timeout=10) as sender:
        sender.send([nhwc_images(), points, np.arange(4, dtype=np.int32)])
        images, received_points, labels = receiver.recv()
    assert tuple(images.shape) == (4, 3, 5, 7) and tuple(received_points.shape) == (4, 16, 3)
    assert labels.dtype == torch.int32 and receiver.batch_size == 4


@pytest.mark.net
def test_tensorcom_dataset_converts_by_declaration(free_port):
    from tensorcom.adapters.torch import TensorcomDataset

    url = f"127.0.0.1:{free_port()}"
    dataset = TensorcomDataset(f"zpull://{url}", length=2, timeout=10,
                               converters=ToTorch(images={"jpg": "NHWC"}, dtype="float32"))

    def send() -> None:  # the dataset binds on its first iteration; a connecting sender waits for it
        with Connection(f"zpush://{url}", timeout=10) as sender:
            for _ in range(2):
                sender.send({"jpg": nhwc_images(), "xyz": np.zeros((4, 9, 3), np.float32)})

    sending = threading.Thread(target=send)
    sending.start()
    try:
        batches = list(torch.utils.data.DataLoader(dataset, batch_size=None))
    finally:
        sending.join()
        dataset.close()
    assert len(batches) == 2
    assert all(tuple(b["jpg"].shape) == (4, 3, 5, 7) and b["jpg"].dtype == torch.float32 for b in batches)
    assert all(tuple(b["xyz"].shape) == (4, 9, 3) for b in batches)


# --- devices ---------------------------------------------------------------------------------------


@pytest.fixture
def no_cuda_calls(monkeypatch):
    """Make every CUDA query and every pinning an error: the CPU path must not make any."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a CUDA call on the CPU path")

    for name in ("is_available", "device_count", "current_device", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, forbidden)
    monkeypatch.setattr(torch.Tensor, "pin_memory", forbidden)


def test_the_cpu_path_makes_no_cuda_call_and_no_copy(no_cuda_calls):
    images = nhwc_images()
    for device in ("cpu", None, torch.device("cpu")):
        out = to_torch([images, np.arange(4)], images={0: "NHWC"}, device=device)
        assert out[0].device.type == "cpu" and out[0].data_ptr() == images.ctypes.data  # still a view
    assert to_torch([images], images={0: "NHWC"}, dtype="float32")[0].dtype == torch.float32
    assert not ToTorch(device="cpu").moves and not ToTorch(device="cpu", pin_memory=False).moves


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_asked_for_without_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match=r"device='cuda' needs CUDA, and torch .* here is a CPU-only build"):
        ToTorch(device="cuda")
    with pytest.raises(ValueError, match="device='cuda:1' needs CUDA"):
        to_torch([np.zeros(2)], device="cuda:1")
    with pytest.raises(ValueError, match="pin_memory=True needs CUDA.*leave pin_memory at None"):
        ToTorch(pin_memory=True)


def test_bad_device_and_pin_memory_arguments():
    with pytest.raises(ValueError, match="'gpu'"):
        ToTorch(device="gpu")
    with pytest.raises(TypeError, match="pin_memory"):
        ToTorch(pin_memory="yes")


def test_another_device_gets_every_tensor_unpinned():
    out = to_torch({"jpg": nhwc_images(), "cls": np.arange(4), "key": ["a"] * 4}, images={"jpg": "NHWC"},
                   dtype="float16", device="meta")  # a real device without memory, on every build
    assert out["jpg"].device.type == "meta" and tuple(out["jpg"].shape) == (4, 3, 5, 7)
    assert out["jpg"].dtype == torch.float16 and out["cls"].device.type == "meta" and out["key"] == ["a"] * 4
    assert ToTorch(device="meta").moves and not ToTorch(device="meta")._pin


@pytest.fixture
def pretend_cuda(monkeypatch):
    """torch says CUDA is there; pin_memory() and .to(<cuda device>) are recorded (in order) instead of run."""
    calls = []
    real_to = torch.Tensor.to

    def pin_memory(self):
        calls.append(("pin", tuple(self.shape)))
        return self.clone()

    def to(self, *args, **kwargs):
        target = args[0] if args else kwargs.get("device")
        if isinstance(target, torch.device) and target.type == "cuda":
            calls.append(("to", str(target), kwargs.get("non_blocking"), tuple(self.shape)))
            return self
        if isinstance(target, torch.dtype):
            calls.append(("cast", target))
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    return calls


def test_cuda_tensors_are_pinned_then_copied_non_blocking_then_cast(pretend_cuda):
    to_nchw = ToTorch(images={0: "NHWC"}, dtype="float32", device="cuda")
    assert to_nchw.moves and to_nchw._pin
    to_nchw([nhwc_images(), np.arange(4, dtype=np.int32), "plain"])
    assert pretend_cuda == [("pin", (4, 3, 5, 7)), ("to", "cuda", True, (4, 3, 5, 7)), ("cast", torch.float32),
                            ("pin", (4,)), ("to", "cuda", True, (4,))]  # uint8 crosses; cast on the device


def test_pin_memory_and_non_blocking_can_be_turned_off(pretend_cuda):
    ToTorch(device="cuda:0", pin_memory=False, non_blocking=False)([np.arange(3)])
    assert pretend_cuda == [("to", "cuda:0", False, (3,))]
    pretend_cuda.clear()
    ToTorch(device="cpu", pin_memory=True)([np.arange(3)])  # pinned on the CPU, moved later by the caller
    assert pretend_cuda == [("pin", (3,))]
    with pytest.raises(ValueError, match="'cuda:3'.*1 CUDA device"):
        ToTorch(device="cuda:3")
