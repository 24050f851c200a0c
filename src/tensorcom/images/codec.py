"""Image bytes -> pixels, through libjpeg-turbo, optionally at a reduced DCT scale.

JPEGs go through simplejpeg (libjpeg-turbo's TurboJPEG API), which can decode at 1/2, 1/4 or 1/8 of
the full size for a fraction of the cost; everything else (PNG, CMYK JPEG, GIF, WebP, ...) goes
through Pillow (whose JPEG path, used as a fallback, is also libjpeg-turbo, with `draft` scaling).

Only power-of-two scales are used: libjpeg-turbo's other M/8 scales have no SIMD kernels and decode
slower than the full image. Neither library decodes a region of a JPEG (libjpeg-turbo's
`jpeg_crop_scanline` / `tj3SetCroppingRegion` are not exposed by simplejpeg or Pillow): `open_region`
uses tensorcom.images._region for that when a libturbojpeg 3 is installed (PyPI `turbojpeg` bundles one),
and otherwise decodes the whole image at the smallest scale that still covers the crop.

Every failure to decode is raised as `tensorcom.errors.SampleError` saying what the bytes looked like.
"""

from __future__ import annotations

import io
import math

import numpy as np

from tensorcom.errors import SampleError
from tensorcom.images import _region as tjcrop

try:  # simplejpeg is optional (extra "images"); Pillow alone works, more slowly
    import simplejpeg as _sj
except ImportError:  # pragma: no cover - exercised only where simplejpeg is missing
    _sj = None

MODES = ("rgb8", "rgba8", "l8", "rgb", "rgba", "l")
_JPEG_MAGIC = b"\xff\xd8"
DCT_SCALES = (1.0, 0.5, 0.25, 0.125)


def _pil():
    """Pillow's Image module, imported on first use (so `tensorcom.images` imports fast)."""
    from PIL import Image

    return Image


def describe(data: bytes) -> str:
    """A short description of some bytes for error messages: length and first bytes."""
    return f"{len(data)} bytes starting {bytes(data[:8])!r}"


def _fail(data: bytes, exc: BaseException, what: str = "decode image") -> SampleError:
    """Wrap a codec exception into the SampleError that callers see."""
    return SampleError(f"cannot {what} ({describe(data)}): {type(exc).__name__}: {exc}")


def check_mode(mode: str) -> str:
    """Return `mode` if it is one of MODES; raise ValueError naming it otherwise."""
    if mode not in MODES:
        raise ValueError(f"unknown image mode {mode!r}; expected one of {', '.join(MODES)}")
    return mode


def _jpeg_header(data: bytes) -> tuple[int, int, str] | None:
    """(width, height, colorspace) of a JPEG simplejpeg can decode to RGB, else None (use Pillow)."""
    if _sj is None or bytes(data[:2]) != _JPEG_MAGIC:
        return None
    try:
        height, width, colorspace, _ = _sj.decode_jpeg_header(data)
    except ValueError:
        return None  # let Pillow try, and produce the error message if it also fails
    if colorspace not in ("Gray", "YCbCr", "RGB"):
        return None  # CMYK / YCCK: Pillow converts those to RGB, TurboJPEG does not
    return width, height, colorspace


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) of encoded image bytes, reading only the header."""
    header = _jpeg_header(data)
    if header is not None:
        return header[0], header[1]
    try:
        with _pil().open(io.BytesIO(data)) as im:
            return im.size
    except Exception as exc:  # Pillow raises many types for bad data
        raise _fail(data, exc, "read image header") from exc


def pick_scale(needed: float) -> float:
    """The smallest power-of-two DCT scale (1, 1/2, 1/4, 1/8) that is at least `needed`."""
    for scale in reversed(DCT_SCALES):
        if scale >= needed:
            return scale
    return 1.0


def _sj_decode(data: bytes, size: tuple[int, int], scale: float, gray: bool) -> np.ndarray | None:
    """simplejpeg decode at DCT `scale` of a JPEG of `size` (w, h) -> HWC uint8 (3 or 1 channels).

    None when libjpeg-turbo reports an error or warning (strict mode): Pillow then gets its turn,
    which accepts the harmless warnings of many real JPEGs and words the error if there is one.
    """
    width, height = size
    kwargs = {}
    if scale < 1.0:  # force exactly this scale: the smallest one whose output covers these minimums
        kwargs = {"min_width": math.ceil(width * scale), "min_height": math.ceil(height * scale)}
    try:
        return _sj.decode_jpeg(data, colorspace="GRAY" if gray else "RGB", **kwargs)
    except ValueError:
        return None


def _pil_open(data: bytes, scale: float, pil_mode: str):
    """Decode with Pillow (JPEG draft-scaled to about `scale`) and convert to `pil_mode`."""
    Image = _pil()
    try:
        im = Image.open(io.BytesIO(data))
        if scale < 1.0 and im.format == "JPEG":
            w, h = im.size
            im.draft(pil_mode if pil_mode in ("RGB", "L") else None,
                     (math.ceil(w * scale), math.ceil(h * scale)))
        if im.mode != pil_mode:
            if im.mode in ("P", "PA", "LA", "I;16", "I") and pil_mode != "L":
                im = im.convert("RGBA")  # palette transparency and 16-bit gray go through RGBA
            im = im.convert(pil_mode)
        im.load()
        return im
    except Exception as exc:
        raise _fail(data, exc) from exc


def open_scaled(data: bytes, needed: float = 1.0, gray: bool = False
                ) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode `data` at the smallest DCT scale >= `needed` into an HWC uint8 RGB (HW with `gray`) array.

    Returns (array, (full_width, full_height)): the array may be smaller than the full size by
    1/2, 1/4 or 1/8 (JPEG only); callers map coordinates with its size / the full size.
    """
    header = _jpeg_header(data)
    scale = pick_scale(needed)
    arr = None if header is None else _sj_decode(data, header[:2], scale, gray)
    if arr is None:
        im = _pil_open(data, scale, "L" if gray else "RGB")
        full = im.size if scale == 1.0 else image_size(data)
        return np.array(im), full
    return (arr[:, :, 0] if gray else arr), header[:2]


def open_region(data: bytes, box: tuple[float, float, float, float], needed: float = 1.0,
                gray: bool = False) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """Decode enough of `data` to cover `box` (left, top, right, bottom in full-size pixels) at the
    smallest DCT scale >= `needed`: just the region where libjpeg-turbo 3 is available (tjcrop),
    else the whole image. Returns (HWC uint8 RGB array, HW with `gray`; the box in its coordinates).
    """
    scale = pick_scale(needed)
    if _jpeg_header(data) is not None and tjcrop.available():
        region = tjcrop.decode_region(data, box, scale, gray)
        if region is not None:
            return region
    arr, full = open_scaled(data, needed, gray)
    sx, sy = arr.shape[1] / full[0], arr.shape[0] / full[1]
    return arr, (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)


def decode(data: bytes, mode: str = "rgb8") -> np.ndarray:
    """Decode image bytes (JPEG, PNG, anything Pillow reads) into a numpy array, at full size.

    Modes: "rgb8" HWC uint8, "rgba8" HWC uint8 with alpha, "l8" HW uint8 gray; "rgb", "rgba", "l"
    the same as float32 in [0, 1]. Raises SampleError for undecodable bytes, ValueError for a bad
    mode. (The shards layer's extcodec.decode_image does the work: one plain decoder in the package.)
    """
    from tensorcom.shards.fields import decode_image

    check_mode(mode)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"decode() takes image bytes, not {type(data).__name__}")
    return decode_image(bytes(data), mode)
