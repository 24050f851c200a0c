"""adapters/keras.py: a Connection or a Pipeline as a keras PyDataset whose epochs are the source's
passes — checked, never shifted — with fields picked as (x, y) and Keras's model-building peek served
again. keras runs in this process on the backend choose_backend() picks (torch unless chosen)."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from tensorcom.adapters.keras import PassReader, check_fields, choose_backend, epoch_length, images_to_float, pick
from tensorcom.pipeline import Pipeline
from tensorcom.transport.connection import Connection

# keras's torch backend converts tensors with np.array(x), which numpy 2 warns about (not ours)
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept:DeprecationWarning")


@pytest.fixture(scope="module")
def keras():
    choose_backend()
    return pytest.importorskip("keras")


@pytest.fixture(scope="module")
def StreamDataset(keras):
    from tensorcom.adapters.keras import StreamDataset

    return StreamDataset


def batch(i: int, n: int = 4) -> list:
    """[images uint8 (n, 2, 2, 1) all equal to i, labels int32 (n,) of i % 2]."""
    return [np.full((n, 2, 2, 1), i, np.uint8), np.full(n, i % 2, np.int32)]


def tiny_model(keras):
    model = keras.Sequential([keras.Input((2, 2, 1)), keras.layers.Flatten(), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


# --- without keras: picking fields, epoch lengths, passes ---------------------------------------


def test_list_batches_are_x_y_and_weights_in_order():
    x, y, w = np.zeros(2), np.ones(2), np.full(2, 0.5)
    assert pick([x, y], None) == (x, y) and pick((x,), None) == (x,) and pick([x, y, w], None) == (x, y, w)
    assert pick([w, x, y], (1, 2)) == (x, y) and pick([x, y, w], ((0, 2), 1)) == ((x, w), y)
    with pytest.raises(ValueError, match="4 fields: give fields"):
        pick([x, y, w, w], None)
    with pytest.raises(ValueError, match="field 5"):
        pick([x, y], (5,))
    assert pick(x, None) == (x,)
    with pytest.raises(TypeError, match="str"):
        pick("batch", None)


def test_dict_batches_need_fields():
    batch_ = {"jpg": np.zeros(2), "cls": np.ones(2), "__key__": ["a", "b"]}
    assert pick(batch_, ("png;jpg", "cls")) == (batch_["jpg"], batch_["cls"])
    with pytest.raises(ValueError, match=r"fields=\('images', 'labels'\).*'cls'"):
        pick(batch_, None)
    with pytest.raises(ValueError, match="'labels' is not in the batch"):
        pick(batch_, ("jpg", "labels"))


def test_fields_are_checked():
    assert check_fields(["a", ["b", "c"]]) == ("a", ("b", "c"))
    for bad in ("images", (), (1, 2, 3, 4), (1.5,), ((),), (True,)):
        with pytest.raises(ValueError):
            check_fields(bad)


def test_images_to_float():
    x, y = images_to_float(np.full((1, 2), 255, np.uint8), np.ones(1, np.int32))
    assert x.dtype == np.float32 and x.max() == 1.0 and y.dtype == np.int32
    floats = np.zeros(2, np.float32)
    assert images_to_float(floats)[0] is floats


def test_epoch_length_rules(free_port):
    assert epoch_length([1, 2, 3], None, False) == 3 and epoch_length([1, 2, 3], 7, False) == 7
    assert epoch_length(iter([]), None, True) is None
    with pytest.raises(ValueError, match="batches_per_epoch=N"):
        epoch_length(Pipeline(iter([1, 2])).filter(bool), None, False)  # unknown length
    with pytest.raises(ValueError, match="positive int"):
        epoch_length([1], 0, False)
    with pytest.raises(ValueError, match="empty"):
        epoch_length([], None, False)
    with Connection(f"zpull://127.0.0.1:{free_port()}") as conn:  # len() is 0.1's bound, not a pass
        with pytest.raises(ValueError, match="Connection does not tell it"):
            epoch_length(conn, None, False)


def test_pass_reader_counts_passes():
    reader = PassReader(Pipeline([1, 2, 3]))
    assert [reader.next_in_pass() for _ in range(4)] == [1, 2, 3, None]
    assert [reader.next_any() for _ in range(4)] == [1, 2, 3, 1] and reader.passes == 3
    assert reader.finish_pass() == 2 and reader.current is None and reader.delivered == 9
    with pytest.raises(ValueError, match="no batch in a whole pass"):
        PassReader([]).next_any()


# --- with keras -----------------------------------------------------------------------------------


def test_items_are_keras_tuples(StreamDataset, keras):
    dataset = StreamDataset(Pipeline([batch(i) for i in range(3)]), transform=images_to_float)
    assert isinstance(dataset, keras.utils.PyDataset) and dataset.num_batches == 3
    x, y = dataset[0]
    assert x.dtype == np.float32 and x.shape == (4, 2, 2, 1) and y.dtype == np.int32 and y.shape == (4,)
    with pytest.raises(TypeError, match="callable"):
        StreamDataset([batch(0)], transform="scale")


def test_keras_peek_is_served_again(StreamDataset):
    """Keras reads one batch to build the model, ends that 'epoch', and starts the epoch over."""
    dataset = StreamDataset(Pipeline([batch(i) for i in range(3)]))
    dataset.on_epoch_begin()
    peeked = dataset[0]
    dataset.on_epoch_end()
    for epoch in range(2):
        dataset.on_epoch_begin()
        firsts = [int(dataset[i][0][0, 0, 0, 0]) for i in range(3)]
        dataset.on_epoch_end()
        assert firsts == [0, 1, 2]
    assert dataset.reader.passes == 2 and dataset.reader.delivered == 6 and int(peeked[0][0, 0, 0, 0]) == 0


def test_fit_takes_one_pass_per_epoch(StreamDataset, keras):
    seen = []

    def record(x, y):
        seen.append(int(x[0, 0, 0, 0]))
        return x.astype(np.float32), y

    dataset = StreamDataset(Pipeline([batch(i) for i in range(5)]), transform=record)
    history = tiny_model(keras).fit(dataset, epochs=3, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 3 and dataset.reader.passes == 3
    assert seen == [0, 1, 2, 3, 4] * 3  # each batch read once: the peeked one was served again


def test_dict_batches_by_field_names(StreamDataset, keras):
    batches = [{"images": b[0].astype(np.float32), "labels": b[1], "__key__": ["k"] * 4} for b in map(batch, range(4))]
    dataset = StreamDataset(batches, fields=("images", "labels"))
    assert len(tiny_model(keras).fit(dataset, epochs=2, verbose=0).history["loss"]) == 2


def test_a_pass_of_another_length_is_an_error(StreamDataset, keras):
    source = Pipeline([[b[0].astype(np.float32), b[1]] for b in map(batch, range(3))])
    with pytest.raises(ValueError, match=r"ended after 3 batches.*batches_per_epoch=3 fits"):
        tiny_model(keras).fit(StreamDataset(source, batches_per_epoch=4), epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"pass has 3 batches.*batches_per_epoch=3 fits"):
        tiny_model(keras).fit(StreamDataset(source, batches_per_epoch=2), epochs=1, verbose=0)


def test_endless_epochs_cross_passes(StreamDataset, keras):
    source = Pipeline([[b[0].astype(np.float32), b[1]] for b in map(batch, range(3))])
    dataset = StreamDataset(source, endless=True, batches_per_epoch=4)
    tiny_model(keras).fit(dataset, epochs=3, verbose=0)
    assert dataset.reader.delivered == 12 and dataset.reader.passes == 4
    unbounded = StreamDataset(source, endless=True)
    assert unbounded.num_batches is None
    tiny_model(keras).fit(unbounded, epochs=2, steps_per_epoch=5, verbose=0, shuffle=False)
    assert unbounded.reader.delivered == 10


@pytest.mark.net
def test_fit_and_evaluate_over_a_connection(StreamDataset, keras, free_port):
    url = f"127.0.0.1:{free_port()}"
    with Connection(f"zpull://{url}", timeout=20) as receiver, Connection(f"zpush://{url}", timeout=20) as sender:
        def serve():  # three epochs of five batches, each ended by a marker
            for epoch in range(3):
                for i in range(5):
                    sender.send(batch(i))
                sender.end_epoch()

        thread = threading.Thread(target=serve)
        thread.start()
        dataset = StreamDataset(receiver, batches_per_epoch=5, transform=images_to_float)
        model = tiny_model(keras)
        history = model.fit(dataset, epochs=2, verbose=0)
        assert len(history.history["loss"]) == 2 and receiver.epoch_number == 2
        loss = model.evaluate(dataset, verbose=0)  # the third pass, whole
        thread.join()
    assert np.isfinite(loss) and receiver.epoch_number == 3 and dataset.reader.delivered == 15


def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=env)


def test_without_keras_the_error_names_the_extra():
    out = run_python("""
        import sys
        sys.modules["keras"] = None
        import tensorcom
        tensorcom.keras.images_to_float  # the adapter itself imports without keras
        try:
            tensorcom.keras.StreamDataset
        except tensorcom.MissingDependency as exc:
            print(exc, exc.extra)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "needs keras: pip install 'tensorcom[keras]' keras"


@pytest.mark.parametrize("variable,config,expected", [
    (None, None, "torch"),  # nothing chosen: torch
    (None, {"backend": "tensorflow"}, "torch"),  # keras's own default, without tensorflow installed
    (None, {"backend": "jax"}, None),  # the user's keras.json
    ("jax", None, None),  # the user's $KERAS_BACKEND
])
def test_choose_backend(monkeypatch, tmp_path, variable, config, expected):
    if config == {"backend": "tensorflow"} and importlib.util.find_spec("tensorflow"):
        pytest.skip("tensorflow is installed: a backend that can run")
    monkeypatch.delitem(sys.modules, "keras", raising=False)  # as before keras is first imported
    monkeypatch.setenv("KERAS_BACKEND", "restored-after-the-test")
    monkeypatch.delenv("KERAS_BACKEND")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    if variable:
        monkeypatch.setenv("KERAS_BACKEND", variable)
    if config:
        (tmp_path / "keras.json").write_text(json.dumps(config))
    assert choose_backend() == expected
    assert os.environ.get("KERAS_BACKEND") == (expected or variable)


def test_too_late_to_choose(monkeypatch, keras):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert choose_backend() is None and "KERAS_BACKEND" not in os.environ  # keras is imported already
