"""Training and evaluation augmentation on image bytes or arrays: crops, flips, resizes, normalize.

Every random choice comes from the `rng` (a numpy Generator) passed in, so a seeded generator
reproduces the same outputs. Given encoded bytes, the crop is chosen first from the header's size,
the image (or only the crop's region, where tensorcom._jpegcrop can) is decoded at the smallest DCT
scale that still covers the crop at the output size (tensorcom.imagecodec.open_region), and the crop is cut
out inside one antialiased bilinear resize (tensorcom.images.resample). Given `out=` (say a row of a
preallocated batch), a transform writes its result there; for uint8 HWC output that is the resize's
own write, so a batch costs no per-image array and no stacking copy.
"""

from __future__ import annotations

import math

import numpy as np

from tensorcom import imagecodec
from tensorcom.checks import positive
from tensorcom.images.resample import check_backend, resize_box

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
Box = tuple[float, float, float, float]  # (left, top, right, bottom) in full-size pixels


def _check_size(size: int, name: str = "size") -> int:
    """An output side length: a positive int, else ValueError."""
    return positive(name, int(size) if isinstance(size, np.integer) else size)


def _region(image, box: Box, needed: float) -> tuple[np.ndarray, Box]:
    """(HW[C] uint8 array, the box in its coordinates) holding `box` (full-size pixels) of `image`:
    bytes are decoded (only the region where possible, at a DCT scale >= needed), arrays used as is."""
    if isinstance(image, np.ndarray):
        return _checked_array(image), box
    if isinstance(image, (bytes, bytearray, memoryview)):
        return imagecodec.open_region(bytes(image), box, needed)
    raise TypeError(f"expected image bytes or a numpy array, got {type(image).__name__}")


def _checked_array(image: np.ndarray) -> np.ndarray:
    """An HW or HWC (1, 3 or 4 channels) uint8 array as HW / HWC; ValueError for anything else."""
    if image.dtype != np.uint8 or image.ndim not in (2, 3) or (
            image.ndim == 3 and image.shape[2] not in (1, 3, 4)):
        raise ValueError(f"expected an HW or HWC uint8 array, got {image.dtype} {image.shape}")
    return image[:, :, 0] if image.ndim == 3 and image.shape[2] == 1 else image


def _full_size(image) -> tuple[int, int]:
    """(width, height) of an array, or of encoded image bytes from their header."""
    if isinstance(image, np.ndarray):
        return image.shape[1], image.shape[0]
    if isinstance(image, (bytes, bytearray, memoryview)):
        return imagecodec.image_size(bytes(image))
    raise TypeError(f"expected image bytes or a numpy array, got {type(image).__name__}")


def _crop_resize(image, box: Box, out: tuple[int, int], flip: bool, backend: str,
                 into: np.ndarray | None = None) -> np.ndarray:
    """`box` (full-size pixels) of `image` (bytes or array) resized to `out` (w, h), maybe mirrored;
    a new array, or `into` written in place (see resample.resize_box)."""
    needed = min(out[0] / (box[2] - box[0]), out[1] / (box[3] - box[1]))
    arr, inner = _region(image, box, needed)
    return resize_box(np.ascontiguousarray(arr), inner, out, flip, backend, into)


class RandomResizedCrop:
    """Random area/aspect crop resized to (size, size), as torchvision's RandomResizedCrop.

    `scale` bounds the crop's area as a fraction of the image, `ratio` its width/height (sampled
    log-uniformly). Called with (JPEG/PNG bytes or an HWC uint8 array, rng) -> (size, size, 3) uint8
    (HW uint8 for a gray array input). `backend` picks the resize code (see tensorcom.images.resample).
    """

    def __init__(self, size: int = 224, scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), backend: str = "auto"):
        self.size = _check_size(size)
        self.backend = check_backend(backend)
        if not (0 < scale[0] <= scale[1] <= 1):
            raise ValueError(f"scale must satisfy 0 < min <= max <= 1, got {scale!r}")
        if not (0 < ratio[0] <= ratio[1]):
            raise ValueError(f"ratio must satisfy 0 < min <= max, got {ratio!r}")
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))

    def __repr__(self) -> str:
        return f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={self.ratio})"

    def box(self, width: int, height: int, rng: np.random.Generator) -> Box:
        """A crop box (left, top, right, bottom) within a width x height image, drawn from `rng`."""
        area = width * height
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            target = area * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(log_lo, log_hi))
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                top = int(rng.integers(0, height - h + 1))
                left = int(rng.integers(0, width - w + 1))
                return (left, top, left + w, top + h)
        return self._fallback(width, height)

    def _fallback(self, width: int, height: int) -> Box:
        """Central crop with the aspect ratio clamped into `ratio` (torchvision's fallback)."""
        aspect = width / height
        if aspect < self.ratio[0]:
            w, h = width, int(round(width / self.ratio[0]))
        elif aspect > self.ratio[1]:
            w, h = int(round(height * self.ratio[1])), height
        else:
            w, h = width, height
        left, top = (width - w) // 2, (height - h) // 2
        return (left, top, left + w, top + h)

    def __call__(self, image, rng: np.random.Generator, flip: bool = False,
                 out: np.ndarray | None = None) -> np.ndarray:
        """Crop + resize `image` (bytes or array); `flip=True` also mirrors it left-right. With `out`
        (a writable uint8 array of the result's shape, e.g. a batch's row) the result is written
        there and `out` returned."""
        box = self.box(*_full_size(image), rng)
        return _crop_resize(image, box, (self.size, self.size), flip, self.backend, out)


def hflip(image: np.ndarray, rng: np.random.Generator, p: float = 0.5) -> np.ndarray:
    """Mirror an HW[C] array left-right with probability `p` (one draw from `rng`); else return it."""
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    if rng.random() < p:
        return np.ascontiguousarray(image[:, ::-1])
    return image


def resize(image, shorter_side: int, backend: str = "auto") -> np.ndarray:
    """Resize an array (or image bytes) so that its shorter side is `shorter_side` (bilinear, antialiased)."""
    shorter_side = _check_size(shorter_side, "shorter_side")
    w, h = _full_size(image)
    scale = shorter_side / min(w, h)
    out = (max(1, round(w * scale)), max(1, round(h * scale)))
    return _crop_resize(image, (0, 0, w, h), out, False, check_backend(backend))


def center_crop(image: np.ndarray, size: int) -> np.ndarray:
    """The central size x size window of an HW[C] array (a copy); ValueError if the array is smaller."""
    size = _check_size(size)
    h, w = image.shape[:2]
    if h < size or w < size:
        raise ValueError(f"cannot center-crop {size}x{size} from an image of {w}x{h}")
    top, left = (h - size) // 2, (w - size) // 2
    return np.ascontiguousarray(image[top:top + size, left:left + size])


def normalize(image: np.ndarray, mean=IMAGENET_MEAN, std=IMAGENET_STD, dtype=np.float32,
              layout: str = "HWC") -> np.ndarray:
    """(image / 255 - mean) / std as `dtype` (float32 or float16), in `layout` "HWC" or "CHW".

    With dtype uint8 the pixels are kept as they are (only the layout changes).
    """
    if layout not in ("HWC", "CHW"):
        raise ValueError(f"layout must be 'HWC' or 'CHW', got {layout!r}")
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        out = image
    elif dtype in (np.float32, np.float16):
        mean_ = np.asarray(mean, np.float32)
        inv = np.float32(1 / 255) / np.asarray(std, np.float32)
        out = image.astype(np.float32)
        out *= inv if image.ndim == 3 else inv.mean()
        out -= mean_ / np.asarray(std, np.float32) if image.ndim == 3 else (mean_ / std).mean()
        out = out.astype(dtype, copy=False)
    else:
        raise ValueError(f"dtype must be uint8, float32 or float16, got {dtype}")
    if layout == "CHW":
        out = np.ascontiguousarray(np.moveaxis(out, -1, 0) if out.ndim == 3 else out[None])
    return out


class _Finish:
    """The last step of a transform: nothing for uint8 HWC, else normalize to `dtype` / `layout`."""

    def __init__(self, dtype, layout: str):
        normalize(np.zeros((1, 1, 3), np.uint8), dtype=dtype, layout=layout)  # validates both
        self.dtype, self.layout = np.dtype(dtype), layout
        self.identity = self.dtype == np.uint8 and layout == "HWC"

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return image if self.identity else normalize(image, dtype=self.dtype, layout=self.layout)

    def into(self, crop, out: np.ndarray | None) -> np.ndarray:
        """crop(into) finished: straight into `out` when nothing follows the crop (uint8 HWC), else
        the finished crop copied into `out` (None: a new array)."""
        if self.identity:
            return crop(out)
        result = self(crop(None))
        if out is None:
            return result
        np.copyto(out, result)
        return out


class TrainTransform:
    """RandomResizedCrop + random horizontal flip (+ normalize); see train_transform. Picklable."""

    def __init__(self, size: int = 224, *, flip: bool = True, dtype="uint8", layout: str = "HWC",
                 scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), backend: str = "auto"):
        self.crop = RandomResizedCrop(size, scale, ratio, backend)
        self.flip = bool(flip)
        self.finish = _Finish(dtype, layout)

    def __repr__(self) -> str:
        return f"TrainTransform({self.crop!r}, flip={self.flip}, dtype={self.finish.dtype}, " \
               f"layout={self.finish.layout!r})"

    def __call__(self, data, rng: np.random.Generator, out: np.ndarray | None = None) -> np.ndarray:
        """(image bytes or array, rng) -> the augmented image; with `out` (an array of its shape and
        dtype, e.g. a batch's row) written there (uint8 HWC: by the resize itself) and `out` returned."""
        mirror = self.flip and rng.random() < 0.5
        return self.finish.into(lambda into: self.crop(data, rng, mirror, into), out)


def train_transform(size: int = 224, *, flip: bool = True, dtype="uint8", layout: str = "HWC",
                    scale: tuple[float, float] = (0.08, 1.0),
                    ratio: tuple[float, float] = (3 / 4, 4 / 3), backend: str = "auto"
                    ) -> TrainTransform:
    """RandomResizedCrop(size, scale, ratio) + random horizontal flip (+ normalize unless uint8).

    Returns a picklable fn(data: bytes | array, rng, out=None) -> (size, size, 3) array of `dtype`
    (uint8, float32, float16), (3, size, size) with layout="CHW"; given `out` (e.g. a row of a
    preallocated batch) it writes the result there, for uint8 HWC straight from the resize (no copy).
    """
    return TrainTransform(size, flip=flip, dtype=dtype, layout=layout, scale=scale, ratio=ratio,
                          backend=backend)


def _center_box(w: int, h: int, size: int, shorter: int) -> Box:
    """The full-size box that resize(shorter) followed by center_crop(size) keeps (same rounding)."""
    scale = shorter / min(w, h)
    rw, rh = max(1, round(w * scale)), max(1, round(h * scale))
    left, top = (rw - size) // 2, (rh - size) // 2
    fx, fy = w / rw, h / rh
    return (left * fx, top * fy, (left + size) * fx, (top + size) * fy)


class EvalTransform:
    """Resize the shorter side + center crop (+ normalize); see eval_transform. Picklable."""

    def __init__(self, size: int = 224, resize: int = 256, *, dtype="uint8", layout: str = "HWC",
                 backend: str = "auto"):
        self.size, self.resize = _check_size(size), _check_size(resize, "resize")
        if size > resize:
            raise ValueError(f"size {size} is larger than resize {resize}")
        self.finish = _Finish(dtype, layout)
        self.backend = check_backend(backend)

    def __repr__(self) -> str:
        return f"EvalTransform(size={self.size}, resize={self.resize}, dtype={self.finish.dtype}, " \
               f"layout={self.finish.layout!r})"

    def __call__(self, data, rng=None, out: np.ndarray | None = None) -> np.ndarray:
        """(image bytes or array, ignored rng) -> the central crop (written into `out` if given)."""
        box = _center_box(*_full_size(data), self.size, self.resize)
        size = (self.size, self.size)
        return self.finish.into(lambda into: _crop_resize(data, box, size, False, self.backend, into), out)


def eval_transform(size: int = 224, resize: int = 256, *, dtype="uint8", layout: str = "HWC",
                   backend: str = "auto") -> EvalTransform:
    """Resize the shorter side to `resize`, then take the central size x size (+ normalize).

    Done as one resize of the central region, decoded at the smallest DCT scale that covers it.
    Returns a picklable fn(data: bytes | array, rng=None, out=None) -> (size, size, 3) array (written
    into `out` when given); `rng` is ignored.
    """
    return EvalTransform(size, resize, dtype=dtype, layout=layout, backend=backend)
