"""Partial JPEG decoding for tensorcom.imagecodec.open_region: only a crop's region, through
libjpeg-turbo 3's TurboJPEG API (ctypes).

`tj3SetCroppingRegion` makes libjpeg-turbo skip the IDCT and colour conversion of the columns left
and right of a region and stop after its last row; for RandomResizedCrop-sized regions that decodes
about 1.4x faster than the whole image. simplejpeg and Pillow do not expose it, so this module calls
a libturbojpeg of version 3 directly, found (on first use) in

  1. the `turbojpeg` wheel from PyPI, which bundles one in `turbojpeg.libs/` (`pip install turbojpeg`;
     its Python API is not used, only the library), else
  2. the system's `libturbojpeg.so.0` when it has the version-3 functions.

Without either, `available()` is False and callers decode the whole image instead. Every function
here returns None instead of raising, so that a caller can always fall back to its other decoders
(which then word the error, if the bytes really are bad).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import math
import os
import threading

import numpy as np

Box = tuple[float, float, float, float]
_INIT_DECOMPRESS, _PF_RGB, _PF_GRAY = 1, 0, 6
_PARAM_SUBSAMP, _PARAM_WIDTH, _PARAM_HEIGHT, _PARAM_COLORSPACE = 4, 5, 6, 8
_MCU_WIDTH = {0: 8, 1: 16, 2: 16, 3: 8, 4: 8, 5: 32, 6: 8}  # by TJSAMP_* (444 422 420 GRAY 440 411 441)
_RGB_COLORSPACES = (0, 1, 2)  # TJCS_RGB, TJCS_YCbCr, TJCS_GRAY (not CMYK / YCCK)


class _Region(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int), ("w", ctypes.c_int), ("h", ctypes.c_int)]


class _Scale(ctypes.Structure):
    _fields_ = [("num", ctypes.c_int), ("denom", ctypes.c_int)]


_state = {"lib": None, "searched": False, "enabled": True}
_lock = threading.Lock()
_local = threading.local()


def _candidates() -> list[str]:
    """Paths of libturbojpeg builds to try, the PyPI-bundled one first."""
    found = []
    try:
        spec = importlib.util.find_spec("turbojpeg")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        libs = os.path.join(os.path.dirname(spec.origin), "turbojpeg.libs", "libturbojpeg*.so*")
        found.extend(sorted(glob.glob(libs)))
    system = ctypes.util.find_library("turbojpeg")
    if system:
        found.append(system)
    return found


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the signatures of the tj3 functions used here."""
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.tj3Init.restype, lib.tj3Init.argtypes = vp, [ctypes.c_int]
    lib.tj3Destroy.restype, lib.tj3Destroy.argtypes = None, [vp]
    lib.tj3DecompressHeader.argtypes = [vp, ctypes.c_char_p, sz]
    lib.tj3Get.argtypes = [vp, ctypes.c_int]
    lib.tj3SetScalingFactor.argtypes = [vp, _Scale]
    lib.tj3SetCroppingRegion.argtypes = [vp, _Region]
    lib.tj3Decompress8.argtypes = [vp, ctypes.c_char_p, sz, vp, ctypes.c_int, ctypes.c_int]
    return lib


def _library() -> ctypes.CDLL | None:
    """The loaded libturbojpeg 3, or None; searched once per process."""
    if not _state["searched"]:
        with _lock:
            for path in _candidates() if not _state["searched"] else []:
                try:
                    lib = ctypes.CDLL(path)
                except OSError:
                    continue
                if hasattr(lib, "tj3SetCroppingRegion"):
                    _state["lib"] = _bind(lib)
                    break
            _state["searched"] = True
    return _state["lib"] if _state["enabled"] else None


def available() -> bool:
    """True when partial decoding can be used in this process."""
    return _library() is not None


def set_enabled(enabled: bool) -> bool:
    """Switch partial decoding on or off (benchmarks, tests); returns the previous setting."""
    previous, _state["enabled"] = _state["enabled"], bool(enabled)
    return previous


class _Handle:
    """One tjhandle per thread (TurboJPEG handles are not thread-safe), destroyed with the thread."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib, self.handle = lib, lib.tj3Init(_INIT_DECOMPRESS)

    def __del__(self):
        if self.handle:
            self.lib.tj3Destroy(self.handle)
            self.handle = None


def _handle(lib: ctypes.CDLL) -> int | None:
    holder = getattr(_local, "holder", None)
    if holder is None:
        holder = _local.holder = _Handle(lib)
    return holder.handle


def _region(box: Box, scale: float, size: tuple[int, int], mcu: int) -> tuple[int, int, int, int]:
    """(x, y, w, h) in scaled pixels covering `box` (full-size pixels), x on the scaled MCU grid."""
    width, height = math.ceil(size[0] * scale), math.ceil(size[1] * scale)
    step = max(1, int(mcu * scale))
    x0 = int(box[0] * scale) // step * step
    y0 = int(box[1] * scale)
    x1, y1 = min(width, math.ceil(box[2] * scale)), min(height, math.ceil(box[3] * scale))
    return x0, y0, max(1, x1 - x0), max(1, y1 - y0)


def decode_region(data: bytes, box: Box, scale: float, gray: bool = False
                  ) -> tuple[np.ndarray, Box] | None:
    """Decode the part of JPEG `data` under `box` (left, top, right, bottom in full-size pixels) at
    DCT `scale` (1, 1/2, 1/4, 1/8). Returns (HWC uint8 RGB array, or HW with `gray`; the box in
    that array's coordinates), or None when unavailable or libjpeg-turbo reports any problem."""
    lib = _library()
    handle = _handle(lib) if lib is not None else None
    if not handle or lib.tj3DecompressHeader(handle, data, len(data)) != 0:
        return None
    size = (lib.tj3Get(handle, _PARAM_WIDTH), lib.tj3Get(handle, _PARAM_HEIGHT))
    mcu = _MCU_WIDTH.get(lib.tj3Get(handle, _PARAM_SUBSAMP))
    if mcu is None or lib.tj3Get(handle, _PARAM_COLORSPACE) not in _RGB_COLORSPACES:
        return None
    x, y, w, h = _region(box, scale, size, mcu)
    if lib.tj3SetScalingFactor(handle, _Scale(1, round(1 / scale))) != 0 or \
            lib.tj3SetCroppingRegion(handle, _Region(x, y, w, h)) != 0:
        return None
    out = np.empty((h, w) if gray else (h, w, 3), np.uint8)
    if lib.tj3Decompress8(handle, data, len(data), out.ctypes.data, 0,
                          _PF_GRAY if gray else _PF_RGB) != 0:
        return None
    return out, (box[0] * scale - x, box[1] * scale - y, box[2] * scale - x, box[3] * scale - y)
