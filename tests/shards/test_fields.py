"""Field codecs by extension: round trips, images in every mode, pickle refusal, agreement with WebDataset."""

from __future__ import annotations

import gzip
import io
import pickle

import numpy as np
import pytest

from tensorcom.errors import SampleError
from tensorcom.shards.fields import (
    Decoder,
    decode_field,
    decode_image,
    decode_sample,
    encode_field,
    encode_image,
    encode_sample,
    handle_extension,
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
    with pytest.raises(ValueError, match="image mode must be one of .*got 'rgb9'; did you mean 'rgb"):
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


# --- Decoder: WebDataset-style handlers -----------------------------------------------------------


def test_decoder_image_handlers_and_defaults():
    sample = encode_sample({"__key__": "k", "jpg": smooth_image(), "seg.png": smooth_image()[:, :, 0],
                            "cls": 3, "json": {"a": 1}})
    raw = Decoder()(sample)  # no image handler: images stay bytes, the rest decodes by extension
    assert raw["jpg"] == sample["jpg"] and raw["cls"] == 3 and raw["json"] == {"a": 1}
    l8 = Decoder("l8")(sample)
    assert l8["jpg"].shape == (48, 64) and l8["seg.png"].dtype == np.uint8
    numpy = Decoder("numpy")(sample)["jpg"]
    assert numpy.dtype == np.float32 and numpy.shape == (48, 64, 3)
    np.testing.assert_allclose(numpy, Decoder("rgb8")(sample)["jpg"] / np.float32(255), atol=1e-6)
    assert Decoder("pil")(sample)["jpg"].size == (64, 48)
    with pytest.raises(ValueError, match="did you mean 'torch'"):
        Decoder("torhc")
    with pytest.raises(TypeError, match="image mode or a callable"):
        Decoder(42)


def test_decoder_torch_handler():
    torch = pytest.importorskip("torch")
    sample = encode_sample({"__key__": "k", "png": smooth_image(), "cls": 1})
    decoded = Decoder("torch")(sample)
    assert isinstance(decoded["png"], torch.Tensor) and decoded["png"].dtype == torch.float32
    assert tuple(decoded["png"].shape) == (3, 48, 64)
    np.testing.assert_allclose(decoded["png"].permute(1, 2, 0).numpy(), smooth_image() / 255.0, atol=1e-6)
    assert tuple(Decoder("torchl8")(sample)["png"].shape) == (1, 48, 64)
    assert decoded["cls"] == 1


def test_custom_handlers_are_tried_in_order():
    seen = []

    def upper_txt(name, data):
        seen.append(name)
        return data.decode().upper() if name == "txt" else None

    sample = encode_sample({"__key__": "k", "txt": "hi", "note.txt.gz": "zipped", "png": smooth_image(),
                            "cls": 4})
    decoded = Decoder(upper_txt, handle_extension("png", lambda data: len(data)), "rgb8",
                      handle_extension("note.txt", lambda data: b"<" + data + b">"))(sample)
    assert decoded["txt"] == "HI" and decoded["note.txt.gz"] == b"<zipped>"  # gunzipped before handlers
    assert decoded["png"] == len(sample["png"])  # the custom handler came before "rgb8"
    assert decoded["cls"] == 4 and sorted(seen) == ["cls", "note.txt", "png", "txt"]
    with pytest.raises(SampleError, match="division by zero") as info:
        Decoder(lambda name, data: 1 / 0 if name == "cls" else None)(dict(sample, __url__="u.tar"))
    assert info.value.member == "k.cls" and info.value.url == "u.tar"
    with pytest.raises(SampleError, match="ZeroDivisionError"):
        Decoder(lambda name, data: 1 / 0)(sample)


def test_one_jpeg_decoder_behind_every_entry_point():
    """fields.decode_image, decode_field, Decoder, images.decode and the crop path's open_scaled and
    open_region are one implementation (tensorcom.imagecodec): the same pixels, to the byte."""
    from tensorcom import imagecodec, images
    from tensorcom.images import augment

    data = encode_image(smooth_image(96, 128), "jpg")
    reference = decode_image(data, "rgb8")
    for pixels in (images.decode(data), decode_field("jpg", data), Decoder("rgb8")(
            {"__key__": "k", "jpg": data})["jpg"], imagecodec.open_scaled(data)[0],
            imagecodec.open_region(data, (0, 0, 128, 96))[0]):
        np.testing.assert_array_equal(pixels, reference)
    np.testing.assert_array_equal(images.decode(data, "l8"), decode_image(data, "l8"))
    assert decode_image is imagecodec.decode_image and images.decode is imagecodec.decode
    assert augment.imagecodec is imagecodec  # the crop path decodes through the same module


def test_one_answer_for_a_bad_image_mode():
    """images.decode and decode_image (fields, pipelines) refuse a bad mode with the same words."""
    from tensorcom import images

    for decode in (images.decode, decode_image):
        with pytest.raises(ValueError, match="image mode must be one of .*got 'rgb9'; did you mean 'rgb"):
            decode(b"", "rgb9")
