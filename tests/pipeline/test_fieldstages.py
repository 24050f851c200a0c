"""WebDataset's stages on Pipeline: decode (image modes, torch, custom handlers, bad-data policies),
rename, map_dict / map_tuple, slice, with_epoch / with_length, and len() — on list sources and on
real shards served over HTTP through the local cache."""

from __future__ import annotations

import io
import itertools
import warnings

import numpy as np
import pytest
from PIL import Image

from tensorcom.errors import SampleError
from tensorcom.pipeline import Pipeline, ShardSource
from tensorcom.pipeline._sliced import Sliced
from tensorcom.shards import SkipCounts, TarWriter, ignore_and_continue, warn_and_continue
from tensorcom.shards.fields import encode_sample, handle_extension


def picture(seed: int, size: tuple[int, int] = (24, 32)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)


def png(seed: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(picture(seed)).save(out, format="PNG")
    return out.getvalue()


def raw_samples(count: int = 6) -> list[dict]:
    """Encoded samples, as a shard reader yields them: {"__key__", "png", "cls", "json"}."""
    return [encode_sample({"__key__": f"k{i}", "png": png(i), "cls": i, "json": {"i": i}}) for i in range(count)]


# --- decode ------------------------------------------------------------------------------------


def test_decode_image_modes_and_defaults():
    rgb8 = list(Pipeline(raw_samples()).decode("rgb8"))
    assert [s["cls"] for s in rgb8] == list(range(6)) and rgb8[2]["json"] == {"i": 2}
    np.testing.assert_array_equal(rgb8[3]["png"], picture(3))
    gray = next(iter(Pipeline(raw_samples()).decode("l8")))["png"]
    assert gray.shape == (24, 32) and gray.dtype == np.uint8
    assert next(iter(Pipeline(raw_samples()).decode("pil")))["png"].size == (32, 24)
    floats = next(iter(Pipeline(raw_samples()).decode("numpy")))["png"]
    assert floats.dtype == np.float32 and floats.max() <= 1.0
    assert isinstance(next(iter(Pipeline(raw_samples()).decode()))["png"], bytes)  # no image handler
    assert len(Pipeline(raw_samples()).decode("rgb8")) == 6


def test_decode_torch_handler():
    torch = pytest.importorskip("torch")
    first = next(iter(Pipeline(raw_samples()).decode("torch")))
    assert isinstance(first["png"], torch.Tensor) and tuple(first["png"].shape) == (3, 24, 32)
    assert first["png"].dtype == torch.float32
    np.testing.assert_allclose(first["png"].numpy(), picture(0).transpose(2, 0, 1) / 255.0, atol=1e-6)


def test_decode_custom_handlers_in_order():
    def label(name, data):
        return int(data) * 10 if name == "cls" else None

    out = list(Pipeline(raw_samples(3)).decode(label, handle_extension("png", len), "rgb8"))
    assert [s["cls"] for s in out] == [0, 10, 20]
    assert out[1]["png"] == len(png(1))  # the custom handler came before "rgb8"


def test_decode_bad_data_policies_skip_and_count():
    samples = raw_samples(5)
    samples[1] = dict(samples[1], png=b"not an image")
    samples[3] = dict(samples[3], json=b"{broken")
    with pytest.raises(SampleError) as info:
        list(Pipeline(samples).decode("rgb8"))
    assert info.value.member == "k1.png"
    counts = SkipCounts()
    kept = list(Pipeline(samples).decode("rgb8", handler=ignore_and_continue, counts=counts))
    assert [s["__key__"] for s in kept] == ["k0", "k2", "k4"]
    assert counts.samples == 2 and "k1.png" in counts.errors[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(list(Pipeline(samples).decode(handler=warn_and_continue))) == 4  # images stay bytes
    assert len(caught) == 1 and "'json'" in str(caught[0].message)
    assert Pipeline(samples).decode("rgb8", handler=ignore_and_continue).length() is None  # may skip


def test_decode_options_checked_when_built():
    with pytest.raises(ValueError, match="did you mean 'rgb8'"):
        Pipeline(raw_samples()).decode("rgb88")
    with pytest.raises(TypeError, match="did you mean 'handler'"):
        Pipeline(raw_samples()).decode("rgb8", handle=ignore_and_continue)


def test_decode_runs_in_worker_threads_and_processes():
    expected = [s["png"] for s in Pipeline(raw_samples()).decode("rgb8")]
    for processes in (False, True):
        stages = Pipeline(raw_samples()).decode("rgb8").rename(image="png", label="cls", keep=False)
        out = list(stages.batch(2).parallel(2, processes=processes).unbatch())
        assert sorted(int(s["label"]) for s in out) == list(range(6))
        for sample in out:
            np.testing.assert_array_equal(sample["image"], expected[int(sample["label"])])


# --- rename, map_dict, map_tuple, to_tuple --------------------------------------------------------


def test_rename_with_alternatives():
    samples = [{"__key__": "a", "jpg": 1, "cls": 0}, {"__key__": "b", "png": 2, "cls": 1, "txt": "x"}]
    out = list(Pipeline(samples).rename(image="jpg;png", label="cls"))
    assert out == [{"__key__": "a", "image": 1, "label": 0}, {"__key__": "b", "image": 2, "label": 1, "txt": "x"}]
    only = list(Pipeline(samples).rename(image="jpg;png", keep=False))
    assert only == [{"__key__": "a", "image": 1}, {"__key__": "b", "image": 2}]
    with pytest.raises(SampleError, match="'webp;gif'"):
        list(Pipeline(samples).rename(image="webp;gif"))
    with pytest.raises(ValueError):
        Pipeline(samples).rename()


def test_map_dict_and_map_tuple():
    samples = [{"__key__": str(i), "cls": i, "txt": f"t{i}"} for i in range(4)]
    out = list(Pipeline(samples).map_dict(cls=lambda v: v * 2, txt=str.upper))
    assert [(s["cls"], s["txt"]) for s in out] == [(0, "T0"), (2, "T1"), (4, "T2"), (6, "T3")]
    assert samples[1]["cls"] == 1  # the input samples are not changed
    with pytest.raises(SampleError, match="no field 'npy'"):
        list(Pipeline(samples).map_dict(npy=np.asarray))
    tuples = list(Pipeline(samples).to_tuple("txt", "cls").map_tuple(str.upper, None))
    assert tuples == [("T0", 0), ("T1", 1), ("T2", 2), ("T3", 3)]
    assert list(Pipeline([(1, 2, 3)]).map_tuple(lambda v: -v)) == [(-1, 2, 3)]
    with pytest.raises(TypeError):
        Pipeline(samples).map_tuple("not callable")
    with pytest.raises(TypeError, match="dict samples"):
        list(Pipeline([(1, 2)]).map_dict(cls=int))


def test_field_stages_decode_rename_to_tuple_from_shards(http_server, tmp_path):
    """The WebDataset recipe on real shards over HTTP, read through the cache: the second epoch does not
    reach the server."""
    for shard in range(2):
        with TarWriter(str(http_server.root / f"fields-{shard}.tar")) as sink:
            for i in range(3):
                sink.write({"__key__": f"s{shard}-{i}", "png" if i % 2 else "jpg": picture(10 * shard + i),
                            "cls": 10 * shard + i})
    urls = f"{http_server.url}/fields-{{0..1}}.tar"
    pipeline = (Pipeline(ShardSource(urls, cache_dir=str(tmp_path / "cache")))
                .decode("rgb8").rename(image="jpg;png").to_tuple("image", "cls").map_tuple(None, lambda c: c + 1))
    for epoch in range(2):
        out = list(pipeline.set_epoch(epoch))
        assert [label for _, label in out] == [1, 2, 3, 11, 12, 13]
        assert all(image.shape == (24, 32, 3) for image, _ in out)
    assert http_server.requests["/fields-0.tar"] == http_server.requests["/fields-1.tar"] == 1


# --- slice, with_epoch, with_length, len -----------------------------------------------------------


@pytest.mark.parametrize("args", [(4,), (2, 8), (1, 9, 3), (3, None), (0, None, 4), (20,), (5, 2)])
def test_slice_is_islice(args):
    pipeline = Pipeline(range(10)).slice(*args)
    expected = list(itertools.islice(range(10), *args))
    assert list(pipeline) == expected and len(pipeline) == len(expected)


def test_slice_arguments_checked():
    for bad in [(-1,), (1, 2, 0), (1.5,), ("a", 3)]:
        with pytest.raises(ValueError):
            Pipeline(range(4)).slice(*bad)
    with pytest.raises(TypeError):
        Pipeline(range(4)).slice()


def test_slice_stops_reading_and_resumes():
    def three_then_fail():
        yield from range(3)
        raise AssertionError("read past the slice's stop")

    assert list(Sliced(three_then_fail(), 0, 3)) == [0, 1, 2]
    node = Sliced(iter(list(range(20))), 1, 15, 2)
    assert [next(node) for _ in range(3)] == [1, 3, 5] and node.position == 6


def test_slice_state_restores_the_rest():
    pipeline = Pipeline(list(range(20))).slice(2, 17, 3)
    it = iter(pipeline)
    first = [next(it), next(it)]
    state = pipeline.state_dict()
    rest = list(it)
    assert first + rest == list(range(2, 17, 3))
    again = Pipeline(list(range(20))).slice(2, 17, 3)
    again.load_state_dict(state)
    assert list(again) == rest


def test_with_length_declares_len():
    unknown = Pipeline(iter(range(7)))
    with pytest.raises(TypeError):
        len(unknown)
    declared = Pipeline(iter(range(7))).with_length(7)
    assert len(declared) == 7 and list(declared) == list(range(7))
    assert len(Pipeline(range(10)).filter(lambda x: x % 2).with_length(5).batch(2)) == 3
    with pytest.raises(ValueError):
        Pipeline(range(3)).with_length(-1)


def test_with_epoch_makes_epochs_of_n_items():
    pipeline = Pipeline(range(5)).with_epoch(12)
    assert len(pipeline) == 12
    assert list(pipeline) == [0, 1, 2, 3, 4] * 2 + [0, 1]  # the source runs again until 12 items came
    short = Pipeline(range(100)).shuffle(10).with_epoch(7)
    first, second = list(short.set_epoch(0)), list(short.set_epoch(1))
    assert len(first) == len(second) == 7 and first != second
    batches = Pipeline(range(10)).batch(4).with_epoch(5)  # an epoch of batches
    assert len(list(batches)) == 5 and len(batches) == 5
    assert list(Pipeline([]).with_epoch(3)) == []  # an empty source ends instead of spinning


def test_with_epoch_on_a_resampled_shard_source(tmp_path):
    for shard in range(3):
        with TarWriter(str(tmp_path / f"r-{shard}.tar")) as sink:
            for i in range(4):
                sink.write({"__key__": f"s{shard}-{i}", "cls": 10 * shard + i})
    pipeline = Pipeline(ShardSource(str(tmp_path / "r-{0..2}.tar"), resampled=True), seed=3).decode().with_epoch(10)
    first, second = list(pipeline.set_epoch(0)), list(pipeline.set_epoch(1))
    assert len(pipeline) == 10 and len(first) == len(second) == 10
    assert all(s["cls"] // 10 in (0, 1, 2) for s in first + second) and first != second
