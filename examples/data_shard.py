"""Converting an image folder into tar shards, resuming the conversion, and training from the shards.

    python examples/data_shard.py [--dir DIR]

Makes a small image folder (3 classes of 12 PNG images, into a temporary folder unless --dir), converts
it with `tensorcom.pipeline.shard_writing.convert` (what `tensorcom shard` runs) into shards of 10
samples written by two processes, deletes one shard as a crash would have left it missing, resumes (the other shards are kept
as they are), and reads the shards back with a Pipeline: every image once, its original bytes, its
class as `cls`. Seconds, no network.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

from tensorcom import Pipeline
from tensorcom.imagecodec import encode_image
from tensorcom.images import ImageFolder
from tensorcom.pipeline import ShardSource
from tensorcom.pipeline.shard_writing import convert
from tensorcom.shards.convert import FilesInput


def make_folder(root: Path) -> ImageFolder:
    """3 class folders of 12 flat-coloured 8×8 PNGs each."""
    for label, name in enumerate(["circle", "square", "star"]):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(12):
            image = np.full((8, 8, 3), (label * 80, i * 20, 0), np.uint8)
            (root / name / f"{i:03d}.png").write_bytes(encode_image(image, "png"))
    return ImageFolder(root)


def main(directory: Path) -> None:
    folder = make_folder(directory / "images")
    pattern = str(directory / "shards" / "train-%04d.tar")
    manifest = convert(FilesInput(folder.samples, folder.root), pattern, maxcount=10, processes=2)
    names = [shard.name for shard in manifest.shards]
    print(f"{len(folder)} images in {len(names)} shards: {', '.join(names)}")

    os.remove(directory / "shards" / names[1])  # as if the conversion had been killed before it
    resumed = convert(FilesInput(folder.samples, folder.root), pattern, maxcount=10, processes=2, resume=True)
    print(f"resumed: {len(resumed.kept)} shards kept, {len(names) - len(resumed.kept)} written again")

    urls = str(directory / "shards" / f"train-{{0000..{len(names) - 1:04d}}}.tar")
    raw = list(Pipeline(ShardSource(urls)))
    files = {os.path.splitext(os.path.relpath(path, folder.root))[0]: (path, label) for path, label in folder}
    same = all(s["png"] == Path(files[s["__key__"]][0]).read_bytes() and int(s["cls"]) == files[s["__key__"]][1]
               for s in raw)
    print(f"read back: {len(raw)} samples, {len({s['__key__'] for s in raw})} distinct keys, "
          f"original bytes and classes: {same}")
    images, labels = next(iter(Pipeline(ShardSource(urls, shuffle=True), seed=0).decode("rgb8")
                               .to_tuple("png", "cls").batch(8)))
    print(f"a training batch: images {images.shape} {images.dtype}, labels {labels.tolist()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args()
    if args.dir is None:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
    else:
        main(args.dir)
