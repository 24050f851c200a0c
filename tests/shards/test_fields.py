"""Field codecs by extension: round trips, images in every mode, pickle refusal, agreement with WebDataset."""

from __future__ import annotations

import gzip
import io
import pickle

import numpy as np
import pytest

from tensorcom.errors import SampleError
from tensorcom.shards.fields import (
    decode_field,
    decode_image,
    decode_sample,
    encode_field,
    encode_image,
    encode_sample,
)


def test_round_trip_by_extension():
    sample = {"__key__": "k", "cls": 7, "index": np.int64(3), "txt": "héllo", "json": {"a": [1, 2]},
              "msgpack": {"b": b"raw", "c": 1.5}, "npy": np.arange(6, dtype=np.int16).reshape(2, 3),
              "npz": {"x": np.ones(3), "y": np.zeros((2, 2), np.uint8)}, "txt.gz": "zipped",
              "bin": b"\x00\x01"}
    encoded = encode_sample(sample)
    assert all(isinstance(v, bytes) for k, v in encoded.items() if k != "__key__")
    assert encoded["cls"] == b"7" and encoded["txt"] == "héllo".encode()
    assert gzip.decompress(encoded["txt.gz"]) == b"zipped"
    decoded = decode_sample(encoded)
    assert decoded["cls"] == 7 and decoded["index"] == 3 and decoded["txt"] == "héllo"
    assert decoded["json"] == {"a": [1, 2]} and decoded["msgpack"] == {"b": b"raw", "c": 1.5}
    np.testing.assert_array_equal(decoded["npy"], sample["npy"])
    assert decoded["npy"].dtype == np.int16
    np.testing.assert_array_equal(decoded["npz"]["y"], sample["npz"]["y"])
    assert decoded["txt.gz"] == "zipped" and decoded["bin"] == b"\x00\x01"


def test_tenbin_field():
    pytest.importorskip("tensorcom.tenbin")
    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([1, 2], np.int16)]
    decoded = decode_field("ten", encode_field("ten", arrays))
    assert len(decoded) == 2 and decoded[0].shape == (3, 4)
    np.testing.assert_array_equal(decoded[1], arrays[1])


def test_pickle_only_when_allowed():
    data = pickle.dumps({"x": 1})
    assert decode_field("pyd", data) == data  # left as bytes
    assert decode_field("pyd", data, allow_pickle=True) == {"x": 1}
    with pytest.raises(TypeError, match="allow_pickle"):
        encode_field("pickle", {"x": 1})
    assert pickle.loads(encode_field("pickle", {"x": 1}, allow_pickle=True)) == {"x": 1}


def smooth_image(height=48, width=64) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 255 // width, y * 255 // height, (x + y) % 256], axis=-1).astype(np.uint8)


@pytest.mark.parametrize("ext", ["png", "ppm", "webp", "jpg", "pgm"])
def test_image_modes(ext):
    image = smooth_image()
    source = image[:, :, 1] if ext == "pgm" else image
    data = encode_image(source, ext)
    lossy = ext in ("jpg", "webp")
    rgb8 = decode_image(data, "rgb8")
    assert rgb8.shape == (48, 64, 3) and rgb8.dtype == np.uint8
    expected = np.repeat(source[:, :, None], 3, axis=2) if ext == "pgm" else image
    assert np.abs(rgb8.astype(int) - expected).mean() < (6 if lossy else 0.01)
    rgb = decode_image(data, "rgb")
    assert rgb.dtype == np.float32 and 0.0 <= rgb.min() and rgb.max() <= 1.0
    np.testing.assert_allclose(rgb, rgb8 / 255.0, atol=1e-6)
    gray = decode_image(data, "l8")
    assert gray.shape == (48, 64) and gray.dtype == np.uint8
    assert decode_image(data, "pil").size == (64, 48)
    assert decode_image(data, "rgba8").shape == (48, 64, 4)


def test_jpeg_fast_path_agrees_with_pillow():
    import PIL.Image

    data = encode_image(smooth_image(), "jpg")
    ours = decode_image(data, "rgb8")
    pillow = np.asarray(PIL.Image.open(io.BytesIO(data)).convert("RGB"))
    assert np.abs(ours.astype(int) - pillow).max() <= 2
    gray = decode_image(data, "l8")
    pillow_gray = np.asarray(PIL.Image.open(io.BytesIO(data)).convert("L"))
    assert np.abs(gray.astype(int) - pillow_gray).mean() < 2


def test_bad_inputs():
    with pytest.raises(ValueError, match="unknown image mode"):
        decode_image(b"", "rgb9")
    with pytest.raises(SampleError):
        decode_image(b"not an image", "rgb8")
    with pytest.raises(SampleError) as info:
        decode_sample({"__key__": "k7", "__url__": "s.tar", "jpg": b"garbage", "cls": b"1"})
    assert info.value.url == "s.tar" and info.value.member == "k7.jpg"
    with pytest.raises(TypeError, match="cls"):
        encode_sample({"__key__": "k", "cls": 1.5})
    with pytest.raises(ValueError, match="'txt' of sample 'k'"):  # UnicodeEncodeError wants 5 arguments
        encode_sample({"__key__": "k", "txt": "\ud800"})
    with pytest.raises(TypeError):
        encode_field("unknownext", object())
    with pytest.raises(ValueError, match="must lie in"):
        encode_image(np.full((4, 4), 2.0), "png")


def test_decode_options():
    sample = {"__key__": "k", "png": encode_image(smooth_image(), "png"), "cls": b"1"}
    assert decode_sample(sample, image=None)["png"] == sample["png"]
    only = decode_sample(sample, only={"cls"})
    assert only["cls"] == 1 and only["png"] == sample["png"]


def test_agrees_with_webdataset_decoder():
    wds = pytest.importorskip("webdataset")
    sample = encode_sample({"__key__": "k", "__url__": "u", "cls": 5, "txt": "t", "json": [1],
                            "npy": np.arange(3), "png": smooth_image(), "jpg": smooth_image(),
                            "seg.png": smooth_image(), "txt.gz": "gz", "mp": {"a": 1}})
    theirs = wds.Decoder([wds.imagehandler("rgb8")])(dict(sample))
    ours = decode_sample(sample, image="rgb8")
    assert set(theirs) == set(ours)
    for name in ("cls", "txt", "json", "txt.gz", "mp"):
        assert ours[name] == theirs[name], name
    for name in ("npy", "png", "seg.png"):
        np.testing.assert_array_equal(ours[name], theirs[name])
    assert np.abs(ours["jpg"].astype(int) - theirs["jpg"]).max() <= 2


def test_memoryview_fields_decode_like_bytes():
    sample = {"__key__": "k", "cls": memoryview(b"7"), "json": memoryview(b'{"a": 1}'),
              "txt": memoryview(b"hi")}
    assert decode_sample(sample) == {"__key__": "k", "cls": 7, "json": {"a": 1}, "txt": "hi"}
