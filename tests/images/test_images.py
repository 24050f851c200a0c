"""tensorcom.images: decode, crop-aware RandomResizedCrop, flips, resize, normalize, transforms."""

from __future__ import annotations

import importlib.util
import io
import math
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from tensorcom import _jpegcrop as tjcrop
from tensorcom import imagecodec, images
from tensorcom.errors import SampleError, TensorcomError
from tensorcom.images import resample


def photo(width: int, height: int, seed: int = 0, cell: int = 40) -> np.ndarray:
    """A smooth random colour field (features about `cell` pixels) with noise, like a photograph."""
    rng = np.random.default_rng(seed)
    base = rng.random((height // cell + 2, width // cell + 2, 3)) * 255
    im = Image.fromarray(base.astype(np.uint8)).resize((width, height), Image.Resampling.BICUBIC)
    arr = np.asarray(im).astype(np.float32) + rng.normal(0, 6, (height, width, 3))
    return np.clip(arr, 0, 255).astype(np.uint8)


def encode(arr: np.ndarray, fmt: str = "JPEG", mode: str | None = None, **kwargs) -> bytes:
    """Encode an array (optionally converted to a Pillow mode first) as image bytes."""
    im = Image.fromarray(arr)
    if mode:
        im = im.convert(mode)
    out = io.BytesIO()
    im.save(out, fmt, **({"quality": 95} if fmt == "JPEG" else {}) | kwargs)
    return out.getvalue()


@pytest.fixture(scope="module")
def small_jpeg() -> bytes:
    return encode(photo(500, 375))


@pytest.fixture(scope="module")
def big_jpeg() -> bytes:
    return encode(photo(1600, 1200, seed=1, cell=160))


def reference_crop(data: bytes, box, size: int, flip: bool = False) -> np.ndarray:
    """The slow path: full Pillow decode, crop, antialiased bilinear resize (what torchvision does)."""
    im = Image.open(io.BytesIO(data)).convert("RGB").crop(box)
    im = im.resize((size, size), Image.Resampling.BILINEAR)
    out = np.asarray(im)
    return out[:, ::-1] if flip else out


def mean_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


# --- decode -------------------------------------------------------------------------------------

def test_decode_modes(small_jpeg):
    rgb8 = images.decode(small_jpeg)
    assert rgb8.shape == (375, 500, 3) and rgb8.dtype == np.uint8
    gray = images.decode(small_jpeg, "l8")
    assert gray.shape == (375, 500) and gray.dtype == np.uint8
    rgb = images.decode(small_jpeg, "rgb")
    assert rgb.dtype == np.float32 and 0 <= rgb.min() and rgb.max() <= 1
    assert np.allclose(rgb * 255, rgb8, atol=0.01)


def test_decode_matches_source(small_jpeg):
    assert mean_abs(images.decode(small_jpeg), photo(500, 375)) < 6  # JPEG loss on a noisy image


@pytest.mark.parametrize("bad", [b"", b"not an image at all", b"\xff\xd8\xff\xe0" + b"\x00" * 50])
def test_decode_garbage_raises_sample_error(bad):
    with pytest.raises(SampleError, match="bytes"):
        images.decode(bad)


def test_decode_truncated_jpeg(small_jpeg):
    with pytest.raises(TensorcomError):
        images.decode(small_jpeg[: len(small_jpeg) // 3])


def test_decode_bad_arguments(small_jpeg):
    with pytest.raises(ValueError, match="nope"):
        images.decode(small_jpeg, "nope")
    with pytest.raises(TypeError):
        images.decode(np.zeros(10, np.uint8))


# --- RandomResizedCrop: fused path against the slow reference -----------------------------------

BACKENDS = ["pil", pytest.param("torch", marks=pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch not installed"))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(6))
def test_crop_matches_reference_small(small_jpeg, seed, backend):
    crop = images.RandomResizedCrop(224, backend=backend)
    fast = crop(small_jpeg, np.random.default_rng(seed))
    box = crop.box(500, 375, np.random.default_rng(seed))
    assert fast.shape == (224, 224, 3) and fast.dtype == np.uint8
    assert mean_abs(fast, reference_crop(small_jpeg, box, 224)) < 1.5


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_crop_matches_reference_dct_scaled(big_jpeg, seed, backend):
    """Large crops of a large JPEG are decoded at 1/2 or 1/4 scale and still match."""
    crop = images.RandomResizedCrop(224, scale=(0.3, 1.0), backend=backend)
    box = crop.box(1600, 1200, np.random.default_rng(seed))
    side = min(box[2] - box[0], box[3] - box[1])
    assert imagecodec.pick_scale(224 / side) < 1  # the test exercises the scaled decode
    fast = crop(big_jpeg, np.random.default_rng(seed))
    assert mean_abs(fast, reference_crop(big_jpeg, box, 224)) < 3


def test_open_scaled_decodes_smaller(big_jpeg):
    arr, full = imagecodec.open_scaled(big_jpeg, 0.3)
    assert full == (1600, 1200) and arr.shape == (600, 800, 3)
    arr, full = imagecodec.open_scaled(big_jpeg, 0.1, gray=True)
    assert arr.shape == (150, 200)
    assert imagecodec.pick_scale(1.5) == 1.0 and imagecodec.pick_scale(0.5) == 0.5


def test_crop_of_array_matches_bytes(small_jpeg):
    crop = images.RandomResizedCrop(96)
    from_bytes = crop(small_jpeg, np.random.default_rng(3))
    from_array = crop(images.decode(small_jpeg), np.random.default_rng(3))
    assert mean_abs(from_bytes, from_array) < 0.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_crop_flip_is_mirror(small_jpeg, backend):
    crop = images.RandomResizedCrop(128, backend=backend)
    plain = crop(small_jpeg, np.random.default_rng(7))
    mirrored = crop(small_jpeg, np.random.default_rng(7), flip=True)
    assert np.array_equal(mirrored, plain[:, ::-1])


def test_crop_boxes_respect_scale_and_ratio():
    crop = images.RandomResizedCrop(224, scale=(0.2, 0.6), ratio=(0.5, 2.0))
    rng = np.random.default_rng(0)
    for _ in range(500):
        left, top, right, bottom = crop.box(640, 480, rng)
        w, h = right - left, bottom - top
        assert 0 <= left < right <= 640 and 0 <= top < bottom <= 480
        assert 0.2 * 0.97 <= w * h / (640 * 480) <= 0.6 * 1.03
        assert 0.5 * 0.97 <= w / h <= 2.0 * 1.03


def test_crop_fallback_clamps_ratio():
    crop = images.RandomResizedCrop(32, scale=(0.9, 1.0), ratio=(3.0, 4.0))
    left, top, right, bottom = crop.box(100, 100, np.random.default_rng(0))
    assert (right - left, bottom - top) == (100, 33) and top == 33


def test_crop_is_deterministic(small_jpeg):
    transform = images.train_transform(64)
    a = [transform(small_jpeg, np.random.default_rng(5)) for _ in range(2)]
    assert np.array_equal(a[0], a[1])
    rng = np.random.default_rng(5)
    b = [transform(small_jpeg, rng) for _ in range(4)]
    assert not all(np.array_equal(b[0], x) for x in b[1:])


def test_crop_arguments_checked():
    for bad in (dict(size=0), dict(size=2.5), dict(scale=(0.5, 0.1)), dict(ratio=(0, 1)),
                dict(backend="cv2")):
        with pytest.raises(ValueError):
            images.RandomResizedCrop(**bad)
    with pytest.raises(TypeError):
        images.RandomResizedCrop(8)("a string", np.random.default_rng(0))


def test_jpeg_with_harmless_warning_still_decodes(small_jpeg):
    """Stray bytes before the end marker: libjpeg-turbo warns (simplejpeg refuses), Pillow decodes."""
    warned = small_jpeg[:-2] + b"\x12\x34\x56" + small_jpeg[-2:]
    crop = images.RandomResizedCrop(64)
    out = crop(warned, np.random.default_rng(0))
    assert mean_abs(out, crop(small_jpeg, np.random.default_rng(0))) < 1


def test_crop_corrupt_bytes_raise_sample_error(small_jpeg):
    crop = images.RandomResizedCrop(64)
    for bad in (b"garbage", small_jpeg[:200], small_jpeg[:600] + b"\x00" * 5000):
        with pytest.raises(SampleError):
            crop(bad, np.random.default_rng(0))


# --- other formats ------------------------------------------------------------------------------

def solid(rgb, size=(80, 60)) -> np.ndarray:
    return np.tile(np.array(rgb, np.uint8), (size[1], size[0], 1))


@pytest.mark.parametrize("fmt,mode", [("PNG", None), ("PNG", "RGBA"), ("PNG", "P"), ("JPEG", "CMYK"),
                                      ("PNG", "L"), ("JPEG", "L")])
def test_formats_become_rgb(fmt, mode):
    data = encode(solid((200, 40, 40)), fmt, mode)
    rng = np.random.default_rng(0)
    for out in (images.RandomResizedCrop(48)(data, rng), images.eval_transform(32, 40)(data)):
        assert out.shape[2] == 3 and out.dtype == np.uint8
        centre = out[out.shape[0] // 2, out.shape[1] // 2].astype(int)
        if mode in ("L",):
            assert abs(centre[0] - centre[1]) <= 2  # gray stays gray
        else:
            assert centre[0] > 150 and centre[1] < 90 and centre[2] < 90


def test_large_png_crop_matches_reference():
    data = encode(photo(300, 200), "PNG")
    crop = images.RandomResizedCrop(100)
    box = crop.box(300, 200, np.random.default_rng(2))
    fast = crop(data, np.random.default_rng(2))
    assert mean_abs(fast, reference_crop(data, box, 100)) < 1


# --- flips, resize, center crop, normalize ------------------------------------------------------

def test_hflip():
    arr = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    assert np.array_equal(images.hflip(arr, np.random.default_rng(0), p=1.0), arr[:, ::-1])
    assert images.hflip(arr, np.random.default_rng(0), p=0.0) is arr
    flips = [images.hflip(arr, np.random.default_rng(s))[0, 0, 0] == 9 for s in range(200)]
    assert 60 < sum(flips) < 140
    with pytest.raises(ValueError):
        images.hflip(arr, np.random.default_rng(0), p=2)


def test_resize_and_center_crop(small_jpeg):
    arr = images.decode(small_jpeg)
    small = images.resize(arr, 150)
    assert small.shape == (150, 200, 3)
    assert images.resize(small_jpeg, 75).shape == (75, 100, 3)
    centre = images.center_crop(arr, 100)
    assert np.array_equal(centre, arr[137:237, 200:300])
    with pytest.raises(ValueError):
        images.center_crop(arr, 400)


@pytest.mark.parametrize("backend", BACKENDS)
def test_eval_transform_matches_resize_then_crop(small_jpeg, backend):
    fused = images.eval_transform(224, 256, backend=backend)(small_jpeg)
    slow = images.center_crop(images.resize(images.decode(small_jpeg), 256), 224)
    assert fused.shape == (224, 224, 3) and mean_abs(fused, slow) < 1.5
    with pytest.raises(ValueError):
        images.eval_transform(300, 256)


def test_eval_transform_big_jpeg_scaled(big_jpeg):
    fused = images.eval_transform(112, 128)(big_jpeg)
    slow = images.center_crop(images.resize(images.decode(big_jpeg), 128), 112)
    assert mean_abs(fused, slow) < 3


def test_normalize_values_and_layouts():
    img = np.full((4, 5, 3), 255, np.uint8)
    out = images.normalize(img)
    expected = (1 - np.array(images.IMAGENET_MEAN)) / np.array(images.IMAGENET_STD)
    assert out.dtype == np.float32 and np.allclose(out[0, 0], expected, atol=1e-5)
    chw = images.normalize(img, dtype=np.float16, layout="CHW")
    assert chw.shape == (3, 4, 5) and chw.dtype == np.float16
    kept = images.normalize(img, dtype=np.uint8, layout="CHW")
    assert kept.dtype == np.uint8 and kept.shape == (3, 4, 5) and kept.flags.c_contiguous
    for bad in (dict(layout="NHWC"), dict(dtype=np.int32)):
        with pytest.raises(ValueError):
            images.normalize(img, **bad)


@pytest.mark.parametrize("dtype,layout,shape", [("uint8", "HWC", (64, 64, 3)),
                                                ("float32", "CHW", (3, 64, 64)),
                                                ("float16", "HWC", (64, 64, 3))])
def test_transform_outputs(small_jpeg, dtype, layout, shape):
    train = images.train_transform(64, dtype=dtype, layout=layout)(small_jpeg, np.random.default_rng(0))
    evaluate = images.eval_transform(64, 72, dtype=dtype, layout=layout)(small_jpeg)
    for out in (train, evaluate):
        assert out.shape == shape and out.dtype == np.dtype(dtype)
    if dtype != "uint8":
        assert -2.5 < float(train.min()) and float(train.max()) < 2.7


@pytest.mark.parametrize("backend", BACKENDS)
def test_transforms_write_into_a_batch_row(small_jpeg, backend):
    """out=: the result is written in place (a batch's row, or a strided view) with the same bits as a new one."""
    image = images.decode(small_jpeg)
    for transform in (images.train_transform(48, backend=backend), images.eval_transform(48, 56, backend=backend),
                      images.train_transform(48, dtype="float32", layout="CHW", backend=backend)):
        fresh = [transform(image, np.random.default_rng(seed)) for seed in range(4)]
        batch = np.zeros((4, *fresh[0].shape), fresh[0].dtype)
        for seed in range(4):
            assert np.shares_memory(transform(image, np.random.default_rng(seed), out=batch[seed]), batch)
        np.testing.assert_array_equal(batch, np.stack(fresh))
    crop = images.RandomResizedCrop(40, backend=backend)
    wide = np.zeros((40, 50, 3), np.uint8)
    assert np.shares_memory(crop(image, np.random.default_rng(1), True, out=wide[:, 5:45]), wide)
    np.testing.assert_array_equal(wide[:, 5:45], crop(image, np.random.default_rng(1), True))
    with pytest.raises(ValueError, match="into"):
        crop(image, np.random.default_rng(1), out=np.zeros((40, 41, 3), np.uint8))


def test_train_transform_flips_about_half(small_jpeg):
    rng = np.random.default_rng(0)
    transform = images.train_transform(32, scale=(1.0, 1.0), ratio=(4 / 3, 4 / 3))
    outs = [transform(small_jpeg, rng) for _ in range(40)]
    first = outs[0]
    mirrored = sum(mean_abs(o, first[:, ::-1]) < 0.5 for o in outs)
    same = sum(mean_abs(o, first) < 0.5 for o in outs)
    assert same + mirrored == 40 and 8 < mirrored < 32


def test_transforms_pickle(small_jpeg):
    import pickle

    for transform in (images.train_transform(32, dtype="float16"), images.eval_transform(32, 40),
                      images.RandomResizedCrop(16)):
        clone = pickle.loads(pickle.dumps(transform))
        a = transform(small_jpeg, np.random.default_rng(1))
        assert np.array_equal(a, clone(small_jpeg, np.random.default_rng(1)))
        assert type(transform).__name__ in repr(clone)


def test_public_names():
    for name in images.__all__:
        assert getattr(images, name) is not None
    assert math.isclose(images.IMAGENET_MEAN[0], 0.485)


AUTO_SCRIPT = """
import numpy as np
from tensorcom import images
from tensorcom.images import resample
data = open(__import__("sys").argv[1], "rb").read()
before = resample._torch_ready()
a = images.train_transform(224)(data, np.random.default_rng(0))
enabled = images.init_worker()
after = resample._torch_ready()
b = images.train_transform(224)(data, np.random.default_rng(0))
print(before, enabled, after, float(np.abs(a.astype(int) - b).mean()))
"""


@pytest.mark.procs
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_auto_backend_uses_torch_only_after_init_worker(small_jpeg, tmp_path):
    """In a fresh process: Pillow until init_worker() sets torch to one thread, then torch."""
    (tmp_path / "x.jpg").write_bytes(small_jpeg)
    done = subprocess.run([sys.executable, "-c", AUTO_SCRIPT, str(tmp_path / "x.jpg")],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    before, enabled, after, diff = done.stdout.split()
    assert (before, enabled, after) == ("False", "True", "True") and float(diff) < 1.0


# --- partial decoding (tensorcom._jpegcrop; only where a libturbojpeg 3 is installed) --------------

needs_tjcrop = pytest.mark.skipif(not tjcrop.available(), reason="no libturbojpeg 3 (pip install turbojpeg)")


@needs_tjcrop
@pytest.mark.parametrize("subsampling", [0, 1, 2])  # Pillow's 4:4:4, 4:2:2, 4:2:0
@pytest.mark.parametrize("scale", [1.0, 0.5, 0.25])
def test_region_matches_full_decode(subsampling, scale):
    data = encode(photo(640, 480, seed=3, cell=80), subsampling=subsampling)
    box = (123, 77, 523, 401)
    arr, inner = tjcrop.decode_region(data, box, scale)
    full, _ = imagecodec.open_scaled(data, scale)
    assert inner[0] >= 0 and inner[1] == 0 or inner[1] >= 0
    left, top = round(box[0] * scale - inner[0]), round(box[1] * scale - inner[1])
    expected = full[top:top + arr.shape[0], left:left + arr.shape[1]]
    assert arr.shape[0] >= (box[3] - box[1]) * scale - 1 and arr.shape[1] >= (box[2] - box[0]) * scale
    assert mean_abs(arr[2:-2, 2:-2], expected[2:-2, 2:-2]) < 0.5  # edges may differ by upsampling


@needs_tjcrop
def test_region_gray_and_refusals(small_jpeg):
    arr, _ = tjcrop.decode_region(small_jpeg, (10, 10, 110, 60), 1.0, gray=True)
    assert arr.ndim == 2 and arr.shape[0] == 50 and arr.shape[1] >= 100
    cmyk = encode(solid((200, 40, 40)), "JPEG", "CMYK")
    assert tjcrop.decode_region(cmyk, (0, 0, 20, 20), 1.0) is None  # left to Pillow
    assert tjcrop.decode_region(b"garbage", (0, 0, 20, 20), 1.0) is None
    assert tjcrop.decode_region(small_jpeg[:5000], (0, 0, 500, 375), 1.0) is None


@needs_tjcrop
@pytest.mark.parametrize("seed", range(3))
def test_crop_same_with_and_without_region(small_jpeg, big_jpeg, seed):
    for data in (small_jpeg, big_jpeg):
        with_region = images.RandomResizedCrop(160, backend="pil")(data, np.random.default_rng(seed))
        previous = tjcrop.set_enabled(False)
        try:
            whole = images.RandomResizedCrop(160, backend="pil")(data, np.random.default_rng(seed))
        finally:
            tjcrop.set_enabled(previous)
        # libjpeg-turbo may upsample chroma a little differently when it skips rows: small changes
        assert mean_abs(with_region, whole) < 1.5


@needs_tjcrop
def test_region_decoding_from_threads(small_jpeg, big_jpeg):
    """One TurboJPEG handle per thread: concurrent decodes give the same pixels as sequential ones."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(data, (16 * k, 8 * k, 200 + 16 * k, 150 + 8 * k)) for k in range(8)
            for data in (small_jpeg, big_jpeg)]
    sequential = [tjcrop.decode_region(data, box, 1.0)[0] for data, box in jobs]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda job: tjcrop.decode_region(job[0], job[1], 1.0)[0], jobs * 3))
    assert all(np.array_equal(a, b) for a, b in zip(sequential * 3, parallel))


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
@pytest.mark.parametrize("flip", [False, True])
def test_torch_resize_into_hwc_matches_public_interpolate(flip):
    """The out= kernel writing straight into HWC gives exactly F.interpolate's antialiased result."""
    import torch
    import torch.nn.functional as F

    image = np.random.default_rng(5).integers(0, 256, (190, 230, 3), dtype=np.uint8)
    got = resample.resize_box(image, (13, 7, 201, 170), (96, 80), flip, "torch")
    tensor = torch.from_numpy(np.ascontiguousarray(image[7:170, 13:201])).permute(2, 0, 1)[None]
    want = F.interpolate(tensor, size=(80, 96), mode="bilinear", antialias=True, align_corners=False)
    want = want[0].permute(1, 2, 0).numpy()
    assert got.shape == (80, 96, 3) and got.flags.c_contiguous and got.flags.writeable
    np.testing.assert_array_equal(got, want[:, ::-1] if flip else want)
