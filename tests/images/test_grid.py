"""tensorcom.images.grid: image batches of any layout to uint8 NHWC, and the grids tensorshow writes."""

from __future__ import annotations

import numpy as np
import pytest

from tensorcom.images.grid import choose, pick, render, title, to_uint8_images


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


def test_choose_defaults_and_class_names():
    images = np.zeros((4, 3, 8, 8), np.float32)
    batch = {"__key__": ["a", "b", "c", "d"], "box": np.zeros((4, 4), np.float32), "cls": np.array([0, 1, 1, 5]),
             "jpg": images, "names": ["cat", "dog"]}
    choice = choose(batch, "imgclass", [])
    assert (choice.images, choice.second, choice.names_from) == ("jpg", "cls", "names")
    assert [title(v, choice.names) for v in batch["cls"]] == ["cat", "dog", "dog", "5"]
    assert choose(batch, "imgclass", [], classes=["x", "y"]).names == ["x", "y"]
    assert choose({"a": images, "b": images}, "img2img", []).second == "b"
    assert choose([images], "imgclass", []).names is None
    with pytest.raises(ValueError, match="no field holds a batch of images"):
        choose({"__key__": ["a"], "cls": np.array([1])}, "imgclass", [])
