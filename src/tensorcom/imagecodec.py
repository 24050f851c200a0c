"""Image bytes ⇄ pixels: the package's one decoder (and encoder) per image format, a codec like tenbin.

JPEGs go through simplejpeg (libjpeg-turbo's TurboJPEG API), which can also decode at 1/2, 1/4 or
1/8 of the full size for a fraction of the cost; everything else (PNG, CMYK JPEG, GIF, WebP, ...)
goes through Pillow (whose JPEG path, used as a fallback, is also libjpeg-turbo, with `draft`
scaling). Only power-of-two scales are used: libjpeg-turbo's other M/8 scales have no SIMD kernels
and decode slower than the full image. `open_region` decodes only a crop's region of a JPEG where a
libturbojpeg 3 is installed (tensorcom._jpegcrop; PyPI `turbojpeg` bundles one), else the whole
image at the smallest scale that covers the crop. Pillow and simplejpeg are imported on first use.

Why in the pure base: the shards layer decodes sample fields (`fields.decode_field`, `.decode("rgb8")`
in pipelines) and the images layer decodes for its augmentations and `tensorcom.images.decode`; the
shards layer comes before the images layer, so the one codec both use sits before both, as tenbin
does for arrays. It takes bytes and gives arrays (or PIL images, torch tensors on request) and knows
nothing of shards, samples or pipelines. Every failure to decode raises
`tensorcom.errors.SampleError` saying what the bytes looked like.

    decode_image(data, mode)   any of IMAGE_MODES: "rgb8" HWC uint8, "rgb" / "numpy" HWC float32 in
                               [0, 1], "l8" / "l" HW gray, "rgba8" / "rgba"; "pil" / "pilrgb" / "pill"
                               / "pilrgba" PIL images; "torch" / "torchrgb" CHW float32 tensors in
                               [0, 1], "torchrgb8" CHW uint8, "torchl8" / "torchl" (1, H, W)
    decode(data, mode)         the array modes only (MODES): tensorcom.images.decode
    encode_image(image, ext)   an array or PIL image -> bytes of the format `ext` names
    image_size(data)           (width, height) from the header
    open_scaled(data, needed)  decoded at the smallest DCT scale >= needed, and the full size
    open_region(data, box, needed)   just enough of `data` to cover `box`
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np

from tensorcom import _jpegcrop
from tensorcom.checks import choice
from tensorcom.errors import SampleError
from tensorcom.extras import require

# mode -> (kind of result, PIL mode)
IMAGE_MODES: dict[str, tuple[str, str]] = {
    "rgb8": ("uint8", "RGB"), "rgb": ("float", "RGB"), "numpy": ("float", "RGB"),
    "l8": ("uint8", "L"), "l": ("float", "L"), "rgba8": ("uint8", "RGBA"), "rgba": ("float", "RGBA"),
    "pil": ("pil", "RGB"), "pilrgb": ("pil", "RGB"), "pill": ("pil", "L"), "pilrgba": ("pil", "RGBA"),
    "torch": ("torch", "RGB"), "torchrgb": ("torch", "RGB"), "torchrgb8": ("torch8", "RGB"),
    "torchl": ("torch", "L"), "torchl8": ("torch8", "L"),
}
PIL_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "ppm": "PPM", "pgm": "PPM", "pbm": "PPM",
               "webp": "WEBP", "tif": "TIFF", "tiff": "TIFF", "bmp": "BMP"}
MODES = ("rgb8", "rgba8", "l8", "rgb", "rgba", "l")  # the array modes of decode()
DCT_SCALES = (1.0, 0.5, 0.25, 0.125)
_JPEG_MAGIC = b"\xff\xd8"


def _pil():
    """Pillow's Image module, imported on first use (MissingDependency names the extra without it)."""
    return require("PIL.Image")


def _simplejpeg():
    """The simplejpeg module, or None where it is not installed (Pillow then decodes JPEGs too)."""
    try:
        import simplejpeg
    except ImportError:  # pragma: no cover - exercised only where simplejpeg is missing
        return None
    return simplejpeg


def describe(data: bytes) -> str:
    """A short description of some bytes for error messages: length and first bytes."""
    return f"{len(data)} bytes starting {bytes(data[:8])!r}"


def _fail(data: bytes, exc: BaseException, what: str = "decode image") -> SampleError:
    """Wrap a codec exception into the SampleError that callers see."""
    return SampleError(f"cannot {what} ({describe(data)}): {type(exc).__name__}: {exc}")


def jpeg_header(data: bytes) -> tuple[int, int, str] | None:
    """(width, height, colorspace) of a JPEG simplejpeg can decode to RGB, else None (use Pillow)."""
    sj = _simplejpeg()
    if sj is None or bytes(data[:2]) != _JPEG_MAGIC:
        return None
    try:
        height, width, colorspace, _ = sj.decode_jpeg_header(data)
    except ValueError:
        return None  # let Pillow try, and produce the error message if it also fails
    if colorspace not in ("Gray", "YCbCr", "RGB"):
        return None  # CMYK / YCCK: Pillow converts those to RGB, TurboJPEG does not
    return width, height, colorspace


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) of encoded image bytes, reading only the header."""
    header = jpeg_header(data)
    if header is not None:
        return header[0], header[1]
    Image = _pil()  # outside the try: a missing Pillow is not bad data
    try:
        with Image.open(io.BytesIO(data)) as im:
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
        return _simplejpeg().decode_jpeg(data, colorspace="GRAY" if gray else "RGB", **kwargs)
    except ValueError:
        return None


def pil_open(data: bytes, scale: float, pil_mode: str) -> Any:
    """Decode with Pillow (JPEG draft-scaled to about `scale`) into a loaded PIL image of `pil_mode`."""
    Image = _pil()  # outside the try: a missing Pillow is not bad data
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
    header = jpeg_header(data)
    scale = pick_scale(needed)
    arr = None if header is None else _sj_decode(data, header[:2], scale, gray)
    if arr is None:
        im = pil_open(data, scale, "L" if gray else "RGB")
        full = im.size if scale == 1.0 else image_size(data)
        return np.array(im), full
    return (arr[:, :, 0] if gray else arr), header[:2]


def open_region(data: bytes, box: tuple[float, float, float, float], needed: float = 1.0,
                gray: bool = False) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """Decode enough of `data` to cover `box` (left, top, right, bottom in full-size pixels) at the
    smallest DCT scale >= `needed`: just the region where libjpeg-turbo 3 is available (_jpegcrop),
    else the whole image. Returns (HWC uint8 RGB array, HW with `gray`; the box in its coordinates).
    """
    scale = pick_scale(needed)
    if jpeg_header(data) is not None and _jpegcrop.available():
        region = _jpegcrop.decode_region(data, box, scale, gray)
        if region is not None:
            return region
    arr, full = open_scaled(data, needed, gray)
    sx, sy = arr.shape[1] / full[0], arr.shape[0] / full[1]
    return arr, (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)


def image_mode(mode: str) -> tuple[str, str]:
    """(kind, PIL mode) of an IMAGE_MODES name; ValueError naming `mode`, the choices and the closest."""
    return IMAGE_MODES[choice("image mode", mode, IMAGE_MODES)]


def decode_image(data: bytes, mode: str = "rgb8") -> Any:
    """Decode image bytes (JPEG, PNG, anything Pillow reads) at full size, as `mode` says (see the
    module docstring): an ndarray, a PIL image or a torch tensor (torch imported only for those).
    Raises SampleError for undecodable bytes, ValueError for an unknown mode."""
    kind, pil_mode = image_mode(mode)
    if kind == "pil" or pil_mode == "RGBA":
        image = pil_open(data, 1.0, pil_mode)
        if kind == "pil":
            return image
        array = np.asarray(image)
    else:
        array, _ = open_scaled(data, 1.0, gray=pil_mode == "L")
    if kind in ("float", "torch"):
        array = array.astype(np.float32) / np.float32(255.0)
    if kind in ("torch", "torch8"):
        import torch

        chw = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
        return torch.from_numpy(np.ascontiguousarray(chw))
    return array


def decode(data: bytes, mode: str = "rgb8") -> np.ndarray:
    """Decode image bytes (JPEG, PNG, anything Pillow reads) into a numpy array at full size, as
    decode_image does for the array modes (MODES): "rgb8" HWC uint8, "rgba8" HWC uint8 with alpha,
    "l8" HW uint8 gray; "rgb", "rgba", "l" the same as float32 in [0, 1]. Raises SampleError for
    undecodable bytes, ValueError for another mode, TypeError for anything but bytes."""
    choice("image mode", mode, MODES)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"decode() takes image bytes, not {type(data).__name__}")
    return decode_image(bytes(data), mode)


def encode_image(image: Any, ext: str = "png", quality: int = 95) -> bytes:
    """Encode an ndarray (uint8, or float in [0, 1]; (H, W), (H, W, 1|3|4)) or a PIL image as `ext`."""
    Image = _pil()
    fmt = PIL_FORMATS.get(ext.lower())
    if fmt is None:
        raise ValueError(f"no image format for extension {ext!r}")
    if isinstance(image, np.ndarray):
        image = Image.fromarray(_as_uint8_image(image))
    if not isinstance(image, Image.Image):
        raise TypeError(f"cannot encode {type(image).__name__} as an image (.{ext})")
    if fmt == "JPEG" and image.mode not in ("RGB", "L", "CMYK"):
        image = image.convert("RGB")
    out = io.BytesIO()
    image.save(out, format=fmt, **({"quality": quality} if fmt in ("JPEG", "WEBP") else {}))
    return out.getvalue()


def _as_uint8_image(array: np.ndarray) -> np.ndarray:
    """An (H, W) or (H, W, 3|4) uint8 array for Pillow; float images in [0, 1] are scaled."""
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)):
        raise ValueError(f"image arrays must be (H, W) or (H, W, 1|3|4), not {array.shape}")
    if array.dtype.kind == "f":
        if array.size and (array.min() < -0.001 or array.max() > 1.001):
            raise ValueError(f"float images must lie in [0, 1], not [{array.min()}, {array.max()}]")
        return (np.clip(array, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    if array.dtype != np.uint8:
        raise ValueError(f"image arrays must be uint8 or float, not {array.dtype}")
    return array
