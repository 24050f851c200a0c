"""Cut a box out of a uint8 image and resize it (antialiased bilinear), with Pillow or torch.

Both backends compute the same filter (torch's antialiased bilinear was written to match Pillow's);
torch's uint8 channels-last kernel (AVX2) is about 4x faster than Pillow's, but only with one
intra-op thread: with more, every 0.2 ms call wakes a thread pool, which costs more than it saves.

    backend="pil"    always Pillow
    backend="torch"  always torch (ImportError without it)
    backend="auto"   torch when this process has already imported it and runs it on one thread
                     (as torch's own DataLoader workers do, and as `init_worker()` arranges), else Pillow

`init_worker()` is for the first lines of a data-loading worker process: it imports torch (if
installed) and sets it to one thread, which enables the fast path there; never call it in a
process that trains, whose torch wants all its threads.
"""

from __future__ import annotations

import sys

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
               backend: str = "auto") -> np.ndarray:
    """Resize the region `box` (left, top, right, bottom; may be fractional) of an HW or HWC uint8
    array to `out` = (width, height), optionally mirrored left-right; returns a new uint8 array."""
    if backend == "torch" or (backend == "auto" and _torch_ready()):
        if image.ndim == 3 and image.shape[2] in (3, 4):
            return _resize_torch(image, box, out, flip)
    return _resize_pil(image, box, out, flip)


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


def _aa_out(tensor, out):
    """torch's antialiased bilinear kernel writing straight into `out` (an NHWC buffer seen as NCHW),
    which skips the NCHW -> NHWC copy F.interpolate's result needs; False where this torch lacks it."""
    import torch

    kernel = getattr(getattr(torch.ops.aten, "_upsample_bilinear2d_aa", None), "out", None)
    if kernel is None:
        return False
    try:
        kernel(tensor, [out.shape[2], out.shape[3]], False, None, None, out=out)
    except (RuntimeError, TypeError):
        return False
    return True


def _resize_torch(image: np.ndarray, box: Box, out: tuple[int, int], flip: bool) -> np.ndarray:
    """torch: crop to the box rounded to whole pixels, then interpolate channels-last uint8 into an
    (h, w, 3) result (mirrored by a flip along its width)."""
    import torch
    import torch.nn.functional as F

    h, w = image.shape[:2]
    left, top = min(max(0, round(box[0])), w - 1), min(max(0, round(box[1])), h - 1)
    right, bottom = max(left + 1, min(w, round(box[2]))), max(top + 1, min(h, round(box[3])))
    tensor = torch.from_numpy(image[top:bottom, left:right, :3]).permute(2, 0, 1).unsqueeze(0)  # NCHW view
    result = torch.empty((1, out[1], out[0], 3), dtype=torch.uint8)
    with torch.inference_mode():
        if not _aa_out(tensor, result.permute(0, 3, 1, 2)):
            scaled = F.interpolate(tensor, size=(out[1], out[0]), mode="bilinear", antialias=True,
                                   align_corners=False)
            result = scaled.permute(0, 2, 3, 1).contiguous()
        if flip:
            result = result.flip(2)
    return result[0].numpy()
