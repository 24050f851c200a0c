"""tensorcom.images.grid: image batches of any layout to uint8 NHWC, and the grids tensorshow writes."""

from __future__ import annotations

import numpy as np
import pytest

from tensorcom.images.grid import pick, render, to_uint8_images


def test_layouts_and_scaling():
    nchw = np.zeros((2, 3, 5, 7), np.float32)
    nchw[:, 0] = 1.0
    out = to_uint8_images(nchw, "x")
    assert out.shape == (2, 5, 7, 3) and out.dtype == np.uint8 and out[0, 0, 0, 0] == 255
    assert to_uint8_images(np.zeros((2, 5, 7), np.uint8), "gray").shape == (2, 5, 7, 3)
    with pytest.raises(ValueError, match="field y"):
        to_uint8_images(np.zeros((2, 5)), "y")


def test_pick_names_the_missing_field():
    assert pick({"a": 1}, "a") == 1 and pick([1, 2], "1") == 2
    with pytest.raises(ValueError, match="'b'"):
        pick({"a": 1}, "b")
    with pytest.raises(ValueError, match="2 fields"):
        pick([1, 2], "5")


def test_render_modes():
    images = np.zeros((5, 8, 8, 3), np.uint8)
    grid = render([images, np.arange(5)], "imgclass", [], limit=4)
    assert grid.size == (2 * 10, 2 * (8 + 14 + 2))
    side = render({"in": images, "out": images}, "img2img", ["in", "out"], limit=1)
    assert side.size == (18, 8 + 14 + 2)
