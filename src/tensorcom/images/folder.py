"""ImageFolder trees and "path label" file lists as indexable lists of (path, label).

    root/
      cat/001.jpg        -> ("root/cat/001.jpg", 0)
      dog/a/002.png      -> ("root/dog/a/002.png", 1)      (class directories are searched recursively)

Classes are the sorted names of root's subdirectories; files are listed in sorted order, so the same
tree always gives the same samples. Nothing is decoded here: `read(i)` returns the file's bytes. `ImageFolderSource` makes a tree a
tensorcom.Pipeline source.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

from tensorcom.errors import OpenError
from tensorcom.pipeline.sources import Source, epoch_portion, field_name, portion_length, read_bytes

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".pgm", ".bmp", ".tif", ".tiff", ".webp", ".gif")


def image_folder_root(directory: str | os.PathLike) -> Path:
    """The class-directory root of an ImageNet-style tree: DIR/train when it exists, else DIR."""
    path = Path(directory)
    if not path.is_dir():
        raise OpenError("not a directory", url=str(path))
    train = path / "train"
    return train if train.is_dir() else path


def _walk(class_dir: str, extensions: tuple[str, ...]) -> list[str]:
    """Sorted paths of the files under class_dir (recursively) whose names end in `extensions`."""
    found = []
    for dirpath, dirnames, filenames in os.walk(class_dir, followlinks=True):
        dirnames.sort()
        found.extend(os.path.join(dirpath, f) for f in sorted(filenames)
                     if f.lower().endswith(extensions) and not f.startswith("."))
    return found


class ImageFolder:
    """The samples of an ImageFolder tree: `classes`, `class_to_idx`, `samples` [(path, label)], len().

    `root` is the directory holding one subdirectory per class; `extensions` the file name endings
    (case-insensitive) that count as images. Raises OpenError for a missing root or one without
    any class directory holding images.
    """

    def __init__(self, root: str | os.PathLike, extensions: tuple[str, ...] = IMG_EXTENSIONS):
        if isinstance(extensions, str):
            raise TypeError(f"extensions must be a tuple of strings, got {extensions!r}")
        self.root = str(root)
        self.extensions = tuple(e.lower() for e in extensions)
        if not os.path.isdir(self.root):
            raise OpenError("image folder root is not a directory", url=self.root)
        self.classes = sorted(e.name for e in os.scandir(self.root)
                              if e.is_dir() and not e.name.startswith("."))
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self.samples = [(path, label) for label, name in enumerate(self.classes)
                        for path in _walk(os.path.join(self.root, name), self.extensions)]
        if not self.samples:
            raise OpenError(f"no class directory with {'/'.join(self.extensions)} files",
                            url=self.root)

    @classmethod
    def from_list(cls, file_list: str | os.PathLike, root: str | os.PathLike | None = None
                  ) -> "ImageFolder":
        """Samples from a text file of "path label" lines (label an int; blank and # lines skipped).

        Relative paths are taken relative to `root`, or else to the list file's directory.
        `classes` becomes ["0", "1", ..., str(max label)].
        """
        file_list = Path(file_list)
        base = Path(root) if root is not None else file_list.parent
        try:
            lines = file_list.read_text().splitlines()
        except OSError as exc:
            raise OpenError(f"cannot read file list: {exc}", url=str(file_list)) from exc
        self = cls.__new__(cls)
        self.root, self.extensions = str(base), IMG_EXTENSIONS
        self.samples = [_parse_line(line, base, file_list, n) for n, line in enumerate(lines, 1)
                        if line.strip() and not line.lstrip().startswith("#")]
        top = max((label for _, label in self.samples), default=-1)
        self.classes = [str(i) for i in range(top + 1)]
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        return self

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[str, int]:
        """(path, label) of sample `index`."""
        return self.samples[index]

    def __iter__(self):
        return iter(self.samples)

    def __repr__(self) -> str:
        return f"ImageFolder({self.root!r}: {len(self.samples)} files, {len(self.classes)} classes)"

    def read(self, index: int) -> tuple[bytes, int]:
        """(file bytes, label) of sample `index`; OpenError naming the file if it cannot be read."""
        path, label = self.samples[index]
        try:
            with open(path, "rb") as stream:
                return stream.read(), label
        except OSError as exc:
            raise OpenError(f"cannot read image: {exc}", url=path) from exc


def _parse_line(line: str, base: Path, file_list: Path, number: int) -> tuple[str, int]:
    """("path", label) from one "path label" line; ValueError naming the file and line if malformed."""
    parts = line.rsplit(None, 1)
    try:
        path, label = parts[0], int(parts[1])
        if label < 0:
            raise ValueError(label)
    except (IndexError, ValueError):
        raise ValueError(f"{file_list}:{number}: expected 'path label' with an int label >= 0, "
                         f"got {line!r}") from None
    return str(base / path), label


class ImageFolderSource(Source):
    """A pipeline source over an ImageFolder tree (`ImageFolder(root)`; or an object with a `.samples` list
    of (path, label) pairs). Samples: {"__key__": path relative to root without extension,
    "__path__": path, EXT: bytes (unless read=False), "cls": label}."""

    def __init__(self, root: Any, *, read: bool = True, shuffle: bool = False):
        self.root = root
        self.read = read
        self.shuffle = shuffle
        self._items: list[tuple[str, int]] | None = None
        self._top = ""

    def items(self) -> list[tuple[str, int]]:
        """The (path, label) pairs, scanned once."""
        if self._items is None:
            folder = self.root
            if isinstance(folder, (str, os.PathLike)):
                folder = ImageFolder(folder)
            self._top = os.fspath(getattr(folder, "root", "") or "")
            self._items = [(os.fspath(p), int(label)) for p, label in folder.samples]
        return self._items

    def _sample(self, path: str, label: int) -> dict:
        key = os.path.splitext(os.path.relpath(path, self._top) if self._top else path)[0]
        sample: dict[str, Any] = {"__key__": key, "__path__": path, "cls": label}
        if self.read:
            sample[field_name(path)] = read_bytes(path)
        return sample

    def iterate(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Iterator[Any]:
        pairs = epoch_portion(self.items(), self.shuffle, seed, epoch, worker, num_workers)
        return (self._sample(path, label) for path, label in pairs)

    def length(self, worker: int = 0, num_workers: int = 1) -> int | None:
        return portion_length(len(self.items()), worker, num_workers)
