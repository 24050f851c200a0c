"""Rebatching (tensorcom.transport.rebatch): the same samples, in order, in batches of another size."""

from __future__ import annotations

import numpy as np
import pytest
from sharing_threads import serve_in_thread  # tests/transport/sharing_threads.py

from tensorcom import Connection
from tensorcom.batch import batch_size, rows
from tensorcom.pipeline import Pipeline
from tensorcom.transport.rebatch import Rebatcher


def batches(sizes, start=0):
    out = []
    for n in sizes:
        ids = np.arange(start, start + n)
        out.append({"x": np.stack([ids, ids * 10], axis=1), "id": [int(i) for i in ids]})
        start += n
    return out


@pytest.mark.parametrize("size", [1, 3, 4, 7, 64])
@pytest.mark.parametrize("sizes", [[4, 4, 4, 4, 2], [5], [1, 9, 3]])
def test_same_samples_same_order(size, sizes):
    rebatcher = Rebatcher(size)
    out = []
    for batch in batches(sizes):
        rebatcher.push(batch)
        while (got := rebatcher.pop()[0]) is not None:
            out.append(got)
    last = rebatcher.flush()[0]
    if last is not None:
        out.append(last)
    assert all(len(b["id"]) == size for b in out[:-1]) and 0 < len(out[-1]["id"]) <= size
    ids = [i for b in out for i in b["id"]]
    assert ids == list(range(sum(sizes)))
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in out])[:, 1], np.arange(sum(sizes)) * 10)


def test_list_batches_keep_their_type_and_tokens_say_what_was_used():
    rebatcher = Rebatcher(3)
    rebatcher.push([np.arange(2), ("a", "b")], token="first")
    assert rebatcher.pop() == (None, [])
    rebatcher.push([np.arange(2, 4), ("c", "d")], token="second")
    batch, done = rebatcher.pop()
    assert isinstance(batch, list) and batch[1] == ("a", "b", "c") and done == ["first"]
    batch, done = rebatcher.flush()
    assert batch[1] == ("d",) and done == ["second"]
    assert rebatcher.flush() == (None, [])


def test_refuses_what_cannot_be_divided():
    rebatcher = Rebatcher(2)
    with pytest.raises(ValueError, match="'name'"):
        rebatcher.push({"x": np.zeros((4, 2)), "name": "one string for the whole batch"})
    with pytest.raises(ValueError, match="'y'"):
        rebatcher.push({"x": np.zeros((4, 2)), "y": np.zeros(3)})
    with pytest.raises(ValueError, match="batch_size"):
        Rebatcher(0)


def test_refuses_a_batch_whose_fields_change():
    rebatcher = Rebatcher(4)
    rebatcher.push({"x": np.zeros((3, 2)), "id": [0, 1, 2]})
    rebatcher.push({"id": [3, 4], "x": np.ones((2, 2))})  # the same fields in another order: fine
    with pytest.raises(ValueError, match="fields"):
        rebatcher.push({"x": np.zeros((3, 2)), "label": [0, 1, 2]})  # would be lost, or fail at pop()
    batch, _ = rebatcher.pop()
    assert list(batch) == ["x", "id"] and batch["id"] == [0, 1, 2, 3]


def list_batches():
    """Two [ids, names] batches of 4 rows each: a list of two fields, as a Connection yields them."""
    return [[np.arange(4 * b, 4 * b + 4, dtype=np.int32), [f"s{i}" for i in range(4 * b, 4 * b + 4)]]
            for b in range(2)]


def pairs(batches_):
    """The (id, name) rows of list batches."""
    return [(int(i), str(name)) for batch in batches_ for i, name in rows(batch)]


@pytest.mark.net
def test_connection_batch_size_pipeline_rebatch_and_unbatch_agree(free_port):
    """The same list batches through Connection(batch_size=3), Pipeline.rebatch(3) and
    Pipeline(Connection).unbatch() give the same rows (the pipeline used to take fields for rows)."""
    expected = [(i, f"s{i}") for i in range(8)]
    url = f"127.0.0.1:{free_port()}"
    server, errors = Connection(f"zsplit://{url}"), []
    with Connection(f"zjoin://{url}", batch_size=3, timeout=10) as consumer:
        thread = serve_in_thread(server, 2, errors, make_batch=lambda i: list_batches()[i])
        joined = list(consumer)
    thread.join(timeout=20)
    assert errors == [] and [batch_size(b) for b in joined] == [3, 3, 2] and pairs(joined) == expected
    piped = list(Pipeline(list_batches()).rebatch(3))
    assert [batch_size(b) for b in piped] == [3, 3, 2] and pairs(piped) == expected
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=10) as puller, \
            Connection(f"zpush://127.0.0.1:{port}", timeout=10) as pusher:
        for batch in list_batches():
            pusher.send(batch)
        pusher.end_epoch()
        unbatched = [(int(i), str(name)) for i, name in Pipeline(puller).unbatch()]
    assert unbatched == expected
