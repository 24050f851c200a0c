"""tensorcom.images.ImageFolder, ImageFolder.from_list and image_folder_root."""

from __future__ import annotations

import os

import pytest

from tensorcom.errors import OpenError
from tensorcom.images import ImageFolder, image_folder_root


def touch(path, data: bytes = b"x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.fixture
def tree(tmp_path):
    """root/{dog,cat,ant}/ with images, a nested dir, a non-image and a hidden file."""
    root = tmp_path / "root"
    touch(root / "dog" / "b.jpg", b"dog-b")
    touch(root / "dog" / "a.JPEG", b"dog-a")
    touch(root / "dog" / "notes.txt")
    touch(root / "cat" / "sub" / "z.png", b"cat-z")
    touch(root / "cat" / "c.jpg", b"cat-c")
    touch(root / "cat" / ".hidden.jpg")
    touch(root / "ant" / "x.webp", b"ant-x")
    touch(root / "README.jpg")  # a file at the top level is not a class
    return root


def test_classes_and_samples(tree):
    folder = ImageFolder(tree)
    assert folder.classes == ["ant", "cat", "dog"]
    assert folder.class_to_idx == {"ant": 0, "cat": 1, "dog": 2}
    rel = [(os.path.relpath(p, tree), label) for p, label in folder.samples]
    assert rel == [("ant/x.webp", 0), ("cat/c.jpg", 1), ("cat/sub/z.png", 1),
                   ("dog/a.JPEG", 2), ("dog/b.jpg", 2)]
    assert len(folder) == 5 and folder[4] == folder.samples[4] and list(folder) == folder.samples
    assert folder.read(3) == (b"dog-a", 2)
    assert "5 files" in repr(folder)


def test_extensions_filter(tree):
    folder = ImageFolder(tree, extensions=(".png",))
    assert [os.path.basename(p) for p, _ in folder.samples] == ["z.png"]
    assert folder.classes == ["ant", "cat", "dog"]  # classes stay the directories
    with pytest.raises(TypeError):
        ImageFolder(tree, extensions=".png")


def test_missing_and_empty_roots(tmp_path):
    with pytest.raises(OpenError, match="nowhere"):
        ImageFolder(tmp_path / "nowhere")
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    with pytest.raises(OpenError, match="empty"):
        ImageFolder(tmp_path / "empty")


def test_read_missing_file_names_it(tree):
    folder = ImageFolder(tree)
    os.unlink(folder.samples[0][0])
    with pytest.raises(OpenError, match="x.webp"):
        folder.read(0)


def test_from_list(tmp_path):
    touch(tmp_path / "imgs" / "a.jpg", b"A")
    listing = tmp_path / "list.txt"
    listing.write_text("# comment\nimgs/a.jpg 3\n\nimgs/b c.jpg 0\n/abs/path.jpg 1\n")
    folder = ImageFolder.from_list(listing)
    assert folder.samples == [(str(tmp_path / "imgs/a.jpg"), 3), (str(tmp_path / "imgs/b c.jpg"), 0),
                              ("/abs/path.jpg", 1)]
    assert folder.classes == ["0", "1", "2", "3"] and len(folder) == 3
    assert folder.read(0) == (b"A", 3)
    other = ImageFolder.from_list(listing, root="/data")
    assert other.samples[0] == ("/data/imgs/a.jpg", 3)


@pytest.mark.parametrize("line", ["justapath.jpg", "a.jpg x", "a.jpg -1"])
def test_from_list_bad_lines(tmp_path, line):
    listing = tmp_path / "list.txt"
    listing.write_text(f"ok.jpg 0\n{line}\n")
    with pytest.raises(ValueError, match="list.txt:2"):
        ImageFolder.from_list(listing)
    with pytest.raises(OpenError):
        ImageFolder.from_list(tmp_path / "missing.txt")


def test_image_folder_root(tmp_path):
    (tmp_path / "flat" / "cls").mkdir(parents=True)
    assert image_folder_root(tmp_path / "flat") == tmp_path / "flat"
    (tmp_path / "imagenet" / "train" / "cls").mkdir(parents=True)
    (tmp_path / "imagenet" / "val").mkdir()
    assert image_folder_root(tmp_path / "imagenet") == tmp_path / "imagenet" / "train"
    assert image_folder_root(str(tmp_path / "imagenet")) == tmp_path / "imagenet" / "train"
    with pytest.raises(OpenError):
        image_folder_root(tmp_path / "absent")
