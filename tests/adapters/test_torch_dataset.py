"""adapters/torch.py's BatchDataset and loader(): a stream (URL or Connection) or a local pipeline as a
torch IterableDataset for DataLoader(batch_size=None), one pass per epoch, converted as declared."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorcom
from tensorcom import Connection, Pipeline
from tensorcom.adapters.torch import loader


def image_batches(count: int, start: int = 0) -> list[dict]:
    return [{"jpg": np.full((2, 4, 6, 3), i, np.uint8), "cls": np.array([i, i], np.int32)}
            for i in range(start, start + count)]


def test_a_pipeline_through_a_dataloader_converted_each_pass():
    pipeline = Pipeline(range(10)).map(lambda i: {"jpg": np.full((4, 6, 3), i, np.uint8), "cls": i}).batch(4)
    batches = loader(pipeline, images={"jpg": "NHWC"}, dtype="float32")
    assert isinstance(batches, torch.utils.data.DataLoader) and len(batches) == 3
    for _ in range(2):  # each iteration is a pass
        got = list(batches)
        assert [tuple(b["jpg"].shape) for b in got] == [(4, 3, 4, 6), (4, 3, 4, 6), (2, 3, 4, 6)]
        assert got[0]["jpg"].dtype == torch.float32 and got[2]["cls"].tolist() == [8, 9]
    counts = batches.dataset.counts
    assert (counts.passes, counts.batches, counts.dropped) == (2, 6, 0)


def send_epochs(url: str, epochs: int, per_epoch: int) -> None:
    with Connection(url, timeout=10) as sender:
        for epoch in range(epochs):
            for batch in image_batches(per_epoch, 10 * epoch):
                sender.send(batch)
            sender.end_epoch()


@pytest.mark.net
def test_a_url_opens_on_first_use_and_each_pass_is_one_epoch(free_port):
    url = f"127.0.0.1:{free_port()}"
    dataset = tensorcom.torch.BatchDataset(f"zpull://{url}", images={"jpg": "NHWC"}, timeout=10)
    assert pickle.loads(pickle.dumps(dataset)).urls == f"zpull://{url}"  # picklable before it connects
    sender = threading.Thread(target=send_epochs, args=(f"zpush://{url}", 2, 3))
    sender.start()
    try:
        with dataset:
            passes = [[int(b["cls"][0]) for b in torch.utils.data.DataLoader(dataset, batch_size=None)]
                      for _ in range(2)]
            assert isinstance(dataset._opened, Connection)
            with pytest.raises(TypeError, match="stream's length"):
                len(dataset)
        assert dataset._opened is None  # closed by the with block
    finally:
        sender.join()
    assert passes == [[0, 1, 2], [10, 11, 12]]
    assert (dataset.counts.passes, dataset.counts.batches) == (2, 6)


@pytest.mark.net
def test_a_connection_given_is_iterated_and_left_open(free_port):
    url = f"127.0.0.1:{free_port()}"
    with Connection(f"zpull://{url}", timeout=10) as conn:
        sender = threading.Thread(target=send_epochs, args=(f"zpush://{url}", 1, 2))
        sender.start()
        dataset = tensorcom.torch.BatchDataset(conn, images={"jpg": "NHWC"})
        got = list(dataset)
        sender.join()
        dataset.close()
        assert not conn._closed
    assert [tuple(b["jpg"].shape) for b in got] == [(2, 3, 4, 6)] * 2


def test_arguments_are_checked():
    BatchDataset = tensorcom.torch.BatchDataset
    with pytest.raises(TypeError, match=r"connection options \['timeout'\] apply only to a URL"):
        BatchDataset([1, 2], timeout=3)
    with pytest.raises(TypeError, match="even must be"):
        BatchDataset([], even="yes")
    with pytest.raises(ValueError, match="ahead"):
        BatchDataset([], ahead=0)
    with pytest.raises(ValueError, match="'NWHC'"):
        BatchDataset([], images={0: "NWHC"})
    with pytest.raises(ValueError, match="even=True needs torch.distributed initialized"):
        next(iter(BatchDataset(image_batches(1), even=True)))


def test_in_a_dataloader_worker_no_device_and_no_even_ends(monkeypatch):
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    with pytest.raises(ValueError, match="num_workers=0"):
        next(iter(tensorcom.torch.BatchDataset(image_batches(1), device="meta")))
    with pytest.raises(ValueError, match="num_workers=0"):
        next(iter(tensorcom.torch.BatchDataset(image_batches(1), even=True)))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ValueError, match="num_workers=0"):  # a rank of a job: even ends would be off
        next(iter(tensorcom.torch.BatchDataset(image_batches(1))))
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    assert len(list(tensorcom.torch.BatchDataset(image_batches(2)))) == 2  # a single process: as it is


def test_a_pipeline_is_a_plain_iterable_made_a_dataset_here():
    """The torch wrapper is the adapters' (tensorcom.torch.iterable_dataset); Pipeline.as_torch() and
    ShardDataset.as_torch() still work, with a DeprecationWarning naming the new spelling."""
    from tensorcom.pipeline import ShardDataset

    pipeline = Pipeline(range(6)).map(lambda i: i * 10)
    assert not isinstance(pipeline, torch.utils.data.IterableDataset)
    dataset = tensorcom.torch.iterable_dataset(pipeline)
    assert isinstance(dataset, torch.utils.data.IterableDataset) and len(dataset) == 6
    assert list(torch.utils.data.DataLoader(dataset, batch_size=None)) == [0, 10, 20, 30, 40, 50]
    assert dataset.state_dict()["chain"] is not None  # stateful: the pipeline's own state
    with pytest.warns(DeprecationWarning, match=r"tensorcom.torch.iterable_dataset"):
        old = pipeline.as_torch()
    assert type(old) is type(dataset) and list(old) == list(dataset)
    with pytest.warns(DeprecationWarning, match=r"ShardDataset.as_torch\(\) is deprecated"):
        ShardDataset(["a.tar"]).as_torch()
    with pytest.raises(TypeError, match="expected an iterable"):
        tensorcom.torch.iterable_dataset(3)
