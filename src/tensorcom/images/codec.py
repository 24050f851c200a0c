"""Image bytes -> pixels for the images layer: the shards layer's decoder plus region decoding.

The decoding itself is tensorcom.shards.imagecodec's (one decoder per format in the package: JPEG
through simplejpeg at a full or reduced DCT scale, everything else through Pillow); this module adds
what only augmentation needs. Neither simplejpeg nor Pillow decodes a region of a JPEG
(libjpeg-turbo's `jpeg_crop_scanline` / `tj3SetCroppingRegion` are not exposed by them):
`open_region` uses tensorcom.images._region for that when a libturbojpeg 3 is installed (PyPI
`turbojpeg` bundles one), and otherwise decodes the whole image at the smallest scale that still
covers the crop.

Every failure to decode is raised as `tensorcom.errors.SampleError` saying what the bytes looked like.
"""

from __future__ import annotations

import numpy as np

from tensorcom.images import _region as tjcrop
from tensorcom.shards.imagecodec import (
    DCT_SCALES,
    decode_image,
    describe,
    image_size,
    jpeg_header,
    open_scaled,
    pick_scale,
)

__all__ = ["DCT_SCALES", "MODES", "check_mode", "decode", "describe", "image_size", "open_region",
           "open_scaled", "pick_scale"]

MODES = ("rgb8", "rgba8", "l8", "rgb", "rgba", "l")


def check_mode(mode: str) -> str:
    """Return `mode` if it is one of MODES; raise ValueError naming it otherwise."""
    if mode not in MODES:
        raise ValueError(f"unknown image mode {mode!r}; expected one of {', '.join(MODES)}")
    return mode


def open_region(data: bytes, box: tuple[float, float, float, float], needed: float = 1.0,
                gray: bool = False) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """Decode enough of `data` to cover `box` (left, top, right, bottom in full-size pixels) at the
    smallest DCT scale >= `needed`: just the region where libjpeg-turbo 3 is available (tjcrop),
    else the whole image. Returns (HWC uint8 RGB array, HW with `gray`; the box in its coordinates).
    """
    scale = pick_scale(needed)
    if jpeg_header(data) is not None and tjcrop.available():
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
    mode, TypeError for anything but bytes. (shards.imagecodec.decode_image does the work.)
    """
    check_mode(mode)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"decode() takes image bytes, not {type(data).__name__}")
    return decode_image(bytes(data), mode)
