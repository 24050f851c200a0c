"""Cut a box out of a uint8 image and resize it (antialiased bilinear), with Pillow or torch.

Both backends compute the same filter (torch's antialiased bilinear was written to match Pillow's);
torch's uint8 channels-last kernel (AVX2) is about 4x faster than Pillow's, but only with one
intra-op thread: with more, every 0.2 ms call wakes a thread pool, which costs more than it saves.

    backend="pil"    always Pillow
    backend="torch"  always torch (ImportError without it)
    backend="auto"   torch when this process has already imported it and runs it on one thread
                     (as torch's own DataLoader workers do, and as `init_worker()` arranges), else Pillow

The torch path resizes straight into the result's channels-last memory (or into `into=`, say a
batch's row), a flip through a scratch buffer per thread mirrored into it: one write per pixel, no
tensor allocated per call.

`init_worker()` is for the first lines of a data-loading worker process: it imports torch (if
installed) and sets it to one thread, which enables the fast path there; never call it in a
process that trains, whose torch wants all its threads.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

BACKENDS = ("auto", "pil", "torch")
Box = tuple[float, float, float, float]


def check_backend(backend: str) -> str:
    """Return `backend` if it is one of BACKENDS, else raise ValueError naming it."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return backend


def init_worker() -> bool:
    """In a data-loading worker process: set torch (if installed) to one thread. True if it is."""
    try:
        import torch
    except ImportError:
        return False
    torch.set_num_threads(1)
    return True


def _torch_ready() -> bool:
    """True when torch is already imported here and set to one intra-op thread."""
    torch = sys.modules.get("torch")
    return torch is not None and getattr(torch, "get_num_threads", lambda: 0)() == 1


def resize_box(image: np.ndarray, box: Box, out: tuple[int, int], flip: bool = False,
               backend: str = "auto", into: np.ndarray | None = None) -> np.ndarray:
    """Resize the region `box` (left, top, right, bottom; may be fractional) of an HW or HWC uint8
    array to `out` = (width, height), optionally mirrored left-right. Returns a new uint8 array, or
    `into` (a writable uint8 array of the result's shape, e.g. a row of a batch) written in place."""
    if into is not None and (into.shape[:2] != (out[1], out[0]) or into.dtype != np.uint8):
        raise ValueError(f"into must be a uint8 array of {out[1]} x {out[0]} pixels, got {into.dtype} {into.shape}")
    if backend == "torch" or (backend == "auto" and _torch_ready()):
        if image.ndim == 3 and image.shape[2] in (3, 4):
            direct = into is None or (into.ndim == 3 and into.shape[2] == 3 and into.flags.c_contiguous
                                      and into.flags.writeable)
            result = _resize_torch(image, box, out, flip, into if direct else None)
            return result if direct or into is None else _copy(into, result)
    result = _resize_pil(image, box, out, flip)
    return result if into is None else _copy(into, result)


def _copy(into: np.ndarray, result: np.ndarray) -> np.ndarray:
    np.copyto(into, result)
    return into


def _resize_pil(image: np.ndarray, box: Box, out: tuple[int, int], flip: bool) -> np.ndarray:
    """Pillow: one resize with a (fractional) box, then a transpose for the flip."""
    from PIL import Image

    im = Image.fromarray(image)
    im = im.resize(out, Image.Resampling.BILINEAR, box=box)
    if flip:
        im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    if im.mode not in ("RGB", "L"):
        im = im.convert("RGB")
    return np.array(im)


class _Torch(threading.local):
    """torch's kernels, looked up once per process: `resize` the antialiased bilinear one that writes
    into a given NCHW view of an NHWC buffer (torch._C's binding, else the aten op's, else None: then
    F.interpolate and a copy), `flip` torch.flip writing into a given tensor (None: flip and copy);
    and per thread one scratch buffer, what a flipped result is resized into before it is mirrored
    into its destination."""

    resize: Any = None
    flip: Any = None
    found = False
    scratch: Any = None

    @classmethod
    def find(cls) -> None:
        import torch

        aten = torch.ops.aten
        candidates = (getattr(torch._C._nn, "_upsample_bilinear2d_aa", None),
                      getattr(getattr(aten, "_upsample_bilinear2d_aa", None), "out", None))
        cls.resize = next((kernel for kernel in candidates if kernel is not None and _works(kernel)), None)
        cls.flip = getattr(getattr(aten, "flip", None), "out", None)
        cls.found = True

    def buffer(self, height: int, width: int):
        """This thread's scratch buffer as (NCHW view, HWC tensor), made anew when the size changes."""
        import torch

        if self.scratch is None or self.scratch[1].shape[:2] != (height, width):
            hwc = torch.empty((height, width, 3), dtype=torch.uint8)
            self.scratch = (hwc.unsqueeze(0).permute(0, 3, 1, 2), hwc)
        return self.scratch


def _works(kernel) -> bool:
    """Whether `kernel` resizes into a given NCHW view of NHWC memory as F.interpolate does."""
    import torch
    import torch.nn.functional as F

    source = torch.arange(60, dtype=torch.uint8).reshape(1, 4, 5, 3).permute(0, 3, 1, 2)
    target = torch.empty((1, 2, 3, 3), dtype=torch.uint8).permute(0, 3, 1, 2)
    try:
        kernel(source, [2, 3], False, None, None, out=target)
    except (RuntimeError, TypeError):
        return False
    return bool(torch.equal(target, F.interpolate(source, size=(2, 3), mode="bilinear", antialias=True)))


_torch = _Torch()


def _interpolate(source, target) -> None:
    """Resize NCHW uint8 `source` into `target`, an NCHW view of an NHWC buffer, antialiased
    bilinear: the kernel that writes straight into it, else F.interpolate and a copy."""
    size = [target.shape[2], target.shape[3]]
    if _torch.resize is not None:
        try:
            _torch.resize(source, size, False, None, None, out=target)
            return
        except (RuntimeError, TypeError):
            pass
    import torch.nn.functional as F

    target.copy_(F.interpolate(source, size=size, mode="bilinear", antialias=True, align_corners=False))


def _resize_torch(image: np.ndarray, box: Box, out: tuple[int, int], flip: bool,
                  into: np.ndarray | None) -> np.ndarray:
    """torch: crop to the box rounded to whole pixels (a view), then interpolate channels-last uint8
    into the (h, w, 3) result or `into` (C-contiguous, writable); a flip resizes into this thread's
    scratch buffer and mirrors that into the result (no tensor allocated per call). No autograd is
    recorded: uint8 tensors never require grad. The NCHW views are made by numpy (cheaper than
    torch's permute)."""
    import torch

    if not _torch.found:
        _Torch.find()
    h, w = image.shape[:2]
    left, top = min(max(0, round(box[0])), w - 1), min(max(0, round(box[1])), h - 1)
    right, bottom = max(left + 1, min(w, round(box[2]))), max(top + 1, min(h, round(box[3])))
    source = torch.from_numpy(image[None, top:bottom, left:right, :3].transpose(0, 3, 1, 2))
    if into is None:
        into = np.empty((out[1], out[0], 3), np.uint8)
    if not flip:
        _interpolate(source, torch.from_numpy(into[None].transpose(0, 3, 1, 2)))
        return into
    nchw, hwc = _torch.buffer(out[1], out[0])
    _interpolate(source, nchw)
    if _torch.flip is not None:
        _torch.flip(hwc, [1], out=torch.from_numpy(into))
    else:
        torch.from_numpy(into).copy_(hwc.flip(1))
    return into
