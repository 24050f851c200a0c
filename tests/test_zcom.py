"""tensorcom.zcom: tensorcom 0.1's import path, its helpers, and TensorcomDataset with torch."""

import itertools
import threading

import numpy as np
import pytest


def test_import_path_is_light():
    from fresh import loaded_by

    assert loaded_by("from tensorcom.zcom import Connection, schemes, converter_table\n"
                     "import tensorcom.adapters.torch, tensorcom.transport.converters", ("torch",)) == []


def test_01_helpers():
    from tensorcom import zcom

    assert zcom.schemes["zpull"] == ("PULL", True) and zcom.schemes["zrsub"] == ("SUB", True)
    assert "zjoin" not in zcom.schemes
    assert zcom.listify(None) is None and zcom.listify(3) == [3] and zcom.listify((1, 2)) == [1, 2]
    assert zcom.transform_with([1, 2, 3], [lambda x: -x, None]) == [-1, 2, -3]
    stats = zcom.Statistics(10)
    stats.add(5)
    assert stats.count == 1
    with pytest.raises(AttributeError):
        zcom.NoSuchThing


def test_numpy_converter_transposes_torch_images():
    torch = pytest.importorskip("torch")
    from tensorcom.zcom import converter_table

    out = converter_table["numpy"](torch.zeros(2, 3, 5, 7))
    assert isinstance(out, np.ndarray) and out.shape == (2, 5, 7, 3)
    back = converter_table["torch"](out)
    assert tuple(back.shape) == (2, 3, 5, 7) and back.dtype == torch.float32


def test_01_torch_converters_still_guess_by_shape():
    """0.1's names behave as in 0.1 (documented as guessing); the declared form is adapters.torch.ToTorch."""
    torch = pytest.importorskip("torch")
    from tensorcom.zcom import converter_table, totorch

    points = np.zeros((8, 16, 3), np.float32)  # not an image, but 0.1 takes it for one
    assert tuple(converter_table["torch"](points).shape) == (3, 8, 16)
    assert tuple(totorch(transpose=True)(points).shape) == (3, 8, 16)
    assert tuple(totorch(transpose=False)(points).shape) == (8, 16, 3)
    assert converter_table["torch"](np.zeros(2, np.int32)).dtype == torch.int64
    assert converter_table["torch"](np.zeros(2, np.float64)).dtype == torch.float32
    assert converter_table["torch"](np.zeros((2, 5, 5, 3), np.uint8)).dtype == torch.uint8
    assert converter_table["torch"]("key") == "key"


def test_01_batch_size_counts_rows():
    from tensorcom import zcom

    assert zcom.batch_size([np.zeros((64, 4, 4, 3), np.uint8), np.zeros(64, np.int32)]) == 64


@pytest.mark.net
def test_tensorcom_dataset_with_dataloader(free_port):
    torch = pytest.importorskip("torch")
    from tensorcom.zcom import Connection, TensorcomDataset

    url = f"127.0.0.1:{free_port()}"
    dataset = TensorcomDataset(f"zpull://{url}", length=4, converters="torch", timeout=10)
    assert isinstance(dataset, torch.utils.data.IterableDataset) and len(dataset) == 4
    sender = Connection(f"zpush://{url}", timeout=10)

    def send_all():  # a connecting sender waits for its receiver, which binds on first iteration
        for i in range(6):
            sender.send([np.full((2, 8, 8, 3), i, np.uint8), np.array([i, i], np.int32)])

    thread = threading.Thread(target=send_all, daemon=True)
    thread.start()
    loader = torch.utils.data.DataLoader(dataset, batch_size=None)
    try:
        first = list(loader)
        second = list(itertools.islice(iter(dataset), 2))
    finally:
        thread.join(timeout=10)
        sender.close(linger=0)
        dataset.close()
    assert [int(b[1][0]) for b in first] == [0, 1, 2, 3]
    assert first[0][0].shape == (2, 3, 8, 8) and first[0][1].dtype == torch.int64
    assert [int(b[1][0]) for b in second] == [4, 5]
    with pytest.raises(ValueError):
        TensorcomDataset("zpull://127.0.0.1:1", length=-1)


def test_tensorcom_dataset_pickles_before_it_connects():
    pytest.importorskip("torch")
    import pickle

    from tensorcom.zcom import TensorcomDataset

    copy = pickle.loads(pickle.dumps(TensorcomDataset("zpull://127.0.0.1:1", length=3, timeout=1)))
    assert type(copy) is TensorcomDataset and len(copy) == 3 and copy.con is None
