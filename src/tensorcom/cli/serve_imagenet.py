"""`serve-imagenet-dir` and `serve-imagenet-shards`: serve augmented training batches, as tensorcom 0.1 did.

Both send `[images, labels]` batches: images uint8 (N, SIZE, SIZE, 3) (float32, ImageNet-normalized,
with `-n`), labels int32 (N,), augmented with RandomResizedCrop(SIZE) + horizontal flip.

    serve-imagenet-dir -d DIR -b 64 [-w WORKERS] [-P N] [-n] [-B] [-S] [URL...]
    serve-imagenet-shards -u 'SHARD URLS' -b 64 [-w WORKERS] [-P N] [-n] [-B] [-S] [URL...]

Options keep tensorcom 0.1's meanings: `-w` decoding workers inside each publisher (0.1: DataLoader
workers), `-P N` N parallel publisher processes, each serving a disjoint part of the data (with one URL,
it must connect: zpush or zrpub, as in 0.1; with several URLs there is one publisher per URL), `-n`
normalize, `-B` serve one preloaded batch over and over (measures the transport alone), `-S` no shuffle
for the directory server (0.1: --no-shuffle) and shuffle for the shard server (0.1: --shuffle). The
default URL is zpub://127.0.0.1:7880. DIR is DIR/train when that exists (0.1's layout), else DIR itself.

With `-w N` each publisher runs N processes (`Pipeline.parallel`) that each read, augment and batch a
share of the data, so only whole batches cross to the publisher; `-P N` needs a URL that allows it
(zpush, zrpub, or one binding URL per publisher) and sends from N processes. On 2 cores both served
about the same rate (1,150-1,300 img/s of 224x224 crops from 500x375 JPEGs).

New: `--size` (default 224), `--min-scale` (smallest crop area, default 0.08), `--epochs E` (default 0:
forever; an end-of-epoch marker per publisher after each), `--count N` (stop after about N batches),
`--seed`, `-r SECONDS` between rate reports on stderr. Both tools build a `tensorcom.Pipeline`
(`dir_pipeline`, `shards_pipeline`) and hand it to `tensorcom.serve`, which runs the publishers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from typing import Any, Callable, Iterator

import numpy as np

from tensorcom.cli.common import (
    Parser,
    entry_point,
    fraction,
    nonnegative_int,
    positive_int,
)

DEFAULT_URL = "zpub://127.0.0.1:7880"


def add_common(parser: argparse.ArgumentParser, aliases: bool = False) -> None:
    """The options both servers share (tensorcom 0.1's names and letters; with `aliases`, also 0.1's
    serve-imagenet-shards spellings -N/--num-workers and -p)."""
    more_workers, more_parallel = (["-N", "--num-workers"], ["-p"]) if aliases else ([], [])
    parser.add_argument("urls", nargs="*", metavar="URL", help=f"where to send batches (default {DEFAULT_URL})")
    parser.add_argument("-b", "--batch-size", type=positive_int, default=64, help="images per batch (default 64)")
    parser.add_argument("-w", "--workers", *more_workers, type=nonnegative_int, default=0,
                        help="decoding and batching processes per publisher (0: decode in the publisher)")
    parser.add_argument("-P", "--parallel", *more_parallel, type=nonnegative_int, default=0,
                        help="number of parallel publisher processes, each on a disjoint part of the data")
    parser.add_argument("-n", "--normalize", action="store_true",
                        help="send float32 images normalized with ImageNet mean/std")
    parser.add_argument("-B", "--benchmark", action="store_true", help="preload one batch and serve it repeatedly")
    parser.add_argument("-r", "--report", type=float, default=10.0, help="seconds between rate reports on stderr (0: none)")
    parser.add_argument("--size", type=positive_int, default=224, help="output image size (default 224)")
    parser.add_argument("--epochs", type=nonnegative_int, default=0, help="epochs to serve (default 0: forever)")
    parser.add_argument("--count", type=nonnegative_int, default=0,
                        help="stop after N batches in all, each of P publishers sending ceil(N/P) (0: no limit)")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the augmentation and shuffling")
    parser.add_argument("--min-scale", type=fraction, default=0.08,
                        help="smallest crop area as a fraction of the image (default 0.08, as torchvision)")


def dir_parser() -> argparse.ArgumentParser:
    """Command line of serve-imagenet-dir."""
    parser = Parser(prog="serve-imagenet-dir", description="Serve an ImageFolder tree with training augmentation.")
    parser.add_argument("-d", "--dir", default="./imagenet", help="dataset directory (uses DIR/train when present)")
    parser.add_argument("-S", "--no-shuffle", action="store_true", help="serve in file order")
    add_common(parser)
    return parser


def shards_parser() -> argparse.ArgumentParser:
    """Command line of serve-imagenet-shards."""
    parser = Parser(prog="serve-imagenet-shards", description="Serve tar shards (jpg/png + cls) with training augmentation.")
    parser.add_argument("-u", "--url", required=True, help="shard URLs, brace-expanded: files, http(s)://, s3://, pipe:")
    parser.add_argument("-S", "--shuffle", action="store_true", help="shuffle shards and samples")
    parser.add_argument("--shuffle-buffer", type=positive_int, default=1000, help="samples in the shuffle buffer (default 1000)")
    add_common(parser, aliases=True)
    return parser


def publishers(urls: list[str], parallel: int) -> tuple[int | None, int]:
    """(workers argument for tensorcom.serve, number of publisher processes) for `urls` and `-P parallel`.

    Without -P there is one publisher per binding URL (0.1 started one per URL), else one. With -P N,
    N publishers: a single URL must then connect (zpush, zrpub), binding URLs need one each. Raises
    ValueError (naming the URL) when that cannot work, or when a URL does not send.
    """
    from tensorcom.pipeline.serving import assign_urls

    workers = parallel if parallel > 0 else None
    assigned, _ = assign_urls(urls, workers)
    return workers, len(assigned)


class Augment:
    """Picklable map function: an image sample dict -> (image array, int32 label).

    Takes the first of the fields jpg/jpeg/png/ppm/webp as the image bytes (or reads the file named by
    `__path__` when there is none, so worker processes do their own reads) and `cls` as the label (bytes
    or str digits, or an int); applies RandomResizedCrop(size, scale=(min_scale, 1)) + flip, and ImageNet
    normalization to float32 when `normalize`. The transform is built lazily in whichever process runs it;
    with `dedicated` (a process that only serves data) that process's torch is first set to one thread
    (images.init_worker), which enables the fast resize.
    """

    FIELDS = ("jpg", "jpeg", "png", "ppm", "webp")

    def __init__(self, size: int, normalize: bool = False, min_scale: float = 0.08, dedicated: bool = False):
        self.size, self.normalize, self.min_scale, self.dedicated = size, normalize, min_scale, dedicated
        self._transform: Callable | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_transform": None}

    def transform(self) -> Callable:
        """The images.train_transform this object applies (built on first use)."""
        if self._transform is None:
            from tensorcom.images import init_worker, train_transform

            if self.dedicated:
                init_worker()
            dtype = "float32" if self.normalize else "uint8"
            self._transform = train_transform(self.size, dtype=dtype, scale=(self.min_scale, 1.0))
        return self._transform

    def __call__(self, sample: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.int32]:
        data = next((sample[name] for name in self.FIELDS if name in sample), None)
        if data is None and "__path__" in sample:  # an ImageFolderSource(read=False) sample: read it here
            with open(sample["__path__"], "rb") as stream:
                data = stream.read()
        if data is None:
            raise KeyError(f"sample {sample.get('__key__')!r} has no image field ({'/'.join(self.FIELDS)}); "
                           f"it has {sorted(sample)}")
        return self.transform()(data, rng), np.int32(label_of(sample))


def label_of(sample: dict) -> int:
    """The integer class of a sample's `cls` field (int, or bytes/str of decimal digits)."""
    value = sample.get("cls")
    if value is None:
        raise KeyError(f"sample {sample.get('__key__')!r} has no 'cls' field; it has {sorted(sample)}")
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value).decode("ascii")
    return int(value)


def dir_pipeline(root: str, *, batch_size: int, size: int = 224, shuffle: bool = True, normalize: bool = False,
                 workers: int = 0, seed: int = 0, min_scale: float = 0.08, dedicated: bool = False):
    """The Pipeline serve-imagenet-dir serves: ImageFolder `root` -> augmented [images, labels] batches.
    `dedicated`: the processes iterating it only serve data (see Augment)."""
    from tensorcom.images import ImageFolderSource
    from tensorcom.pipeline import Pipeline

    # Augment reads each file where it runs; the tree is scanned once, here, not in every process
    source = ImageFolderSource(root, shuffle=shuffle, read=False)
    source.items()
    pipeline = Pipeline(source, seed=seed)
    return finish_pipeline(pipeline, Augment(size, normalize, min_scale, dedicated), batch_size, workers)


def shards_pipeline(urls: str, *, batch_size: int, size: int = 224, shuffle: bool = False, shuffle_buffer: int = 1000,
                    normalize: bool = False, workers: int = 0, seed: int = 0, min_scale: float = 0.08,
                    dedicated: bool = False):
    """The Pipeline serve-imagenet-shards serves: tar shards -> augmented [images, labels] batches.
    `dedicated`: the processes iterating it only serve data (see Augment)."""
    from tensorcom.pipeline import Pipeline
    from tensorcom.pipeline.sources import ShardSource

    pipeline = Pipeline(ShardSource(urls, shuffle_shards=shuffle) if shuffle else ShardSource(urls), seed=seed)
    if shuffle:
        pipeline = pipeline.shuffle(shuffle_buffer)
    return finish_pipeline(pipeline, Augment(size, normalize, min_scale, dedicated), batch_size, workers)


def finish_pipeline(pipeline, augment: Augment, batch_size: int, workers: int):
    """Add the augmentation and batching to `pipeline`: inline when `workers` is 0, else in `workers`
    spawned processes, each augmenting and batching its own share (only whole batches cross to the
    consumer) with torch's fast resize enabled there (images.init_worker)."""
    from tensorcom.images.resample import init_worker

    pipeline = pipeline.map(augment, rng=True).batch(batch_size, collate=collate_pair)
    return pipeline.parallel(workers, init=init_worker) if workers > 0 else pipeline


def collate_pair(samples: list[tuple[np.ndarray, np.int32]]) -> list[np.ndarray]:
    """[(image, label), ...] -> [images (N, ...), labels int32 (N,)] (a list, as tensorcom 0.1 sent)."""
    images = np.stack([image for image, _ in samples])
    return [images, np.array([label for _, label in samples], dtype=np.int32)]


class Preloaded:
    """A re-iterable that yields the first batch of `pipeline` `times` times (forever when None).

    Used by --benchmark: the batch is computed once, in whichever process iterates, so that only the
    transport is measured. Picklable (it holds the pipeline, not the batch).
    """

    def __init__(self, pipeline, times: int | None):
        self.pipeline, self.times = pipeline, times
        self._batch = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_batch": None}

    def __len__(self) -> int:
        if self.times is None:
            raise TypeError("an endless Preloaded has no length")
        return self.times

    def __iter__(self) -> Iterator[Any]:
        if self._batch is None:
            self._batch = next(iter(self.pipeline))
        repeats = itertools.repeat(self._batch) if self.times is None else itertools.repeat(self._batch, self.times)
        return iter(repeats)


def benchmark_pipeline(pipeline, seed: int):
    """A Pipeline serving `pipeline`'s first batch over and over, an epoch being as many batches as
    `pipeline` yields (1000 when its length is unknown)."""
    from tensorcom.pipeline import Pipeline

    times = pipeline.length()
    return Pipeline(Preloaded(pipeline, times if times else 1000), seed=seed)


def serve_args(args: argparse.Namespace, pipeline) -> int:
    """Serve `pipeline` as the parsed command line says (URLs, -P, -B, --epochs, --count, -r); returns 0.

    With --count the epochs run back to back (one end-of-epoch marker at the end) and each publisher
    stops after its share of the count (rounded up).
    """
    from tensorcom.pipeline.serving import serve

    urls = args.urls or [DEFAULT_URL]
    workers, count = publishers(urls, args.parallel)
    if args.benchmark:
        pipeline = benchmark_pipeline(pipeline, args.seed)
    epochs = args.epochs or None
    if args.count:
        pipeline, epochs = pipeline.repeat(epochs).take(-(-args.count // count)), 1
    print(f"serving {describe(pipeline)} to {' '.join(urls)} from {count} publisher(s)", file=sys.stderr, flush=True)
    serve(pipeline, urls, workers=workers, epochs=epochs, report=args.report or None)
    return 0


def describe(pipeline) -> str:
    """A short description of what is served: batch count per epoch when known."""
    length = pipeline.length()
    return f"{length} batches per epoch" if length is not None else "batches"


def check_dir(path: str) -> str:
    """`path` when it is a directory, else ValueError naming it; then DIR/train when that exists."""
    if not os.path.isdir(path):
        raise ValueError(f"dataset directory {path!r} does not exist or is not a directory")
    from tensorcom.images import image_folder_root

    return os.fspath(image_folder_root(path))


@entry_point
def main_dir(argv: list[str] | None = None) -> int:
    """serve-imagenet-dir: serve an ImageFolder tree with training augmentation."""
    args = dir_parser().parse_args(argv)
    root = check_dir(args.dir)
    pipeline = dir_pipeline(root, batch_size=args.batch_size, size=args.size, shuffle=not args.no_shuffle,
                            normalize=args.normalize, workers=args.workers, seed=args.seed, min_scale=args.min_scale,
                            dedicated=True)
    return serve_args(args, pipeline)


@entry_point
def main_shards(argv: list[str] | None = None) -> int:
    """serve-imagenet-shards: serve tar shards (image + cls) with training augmentation."""
    args = shards_parser().parse_args(argv)
    pipeline = shards_pipeline(args.url, batch_size=args.batch_size, size=args.size, shuffle=args.shuffle,
                               shuffle_buffer=args.shuffle_buffer, normalize=args.normalize, workers=args.workers,
                               seed=args.seed, min_scale=args.min_scale, dedicated=True)
    return serve_args(args, pipeline)


if __name__ == "__main__":  # python -m tensorcom.cli.serve_imagenet {dir,shards} ARGS
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which not in ("dir", "shards"):
        print("usage: python -m tensorcom.cli.serve_imagenet {dir,shards} ARGS...", file=sys.stderr)
        sys.exit(2)
    sys.argv = [f"serve-imagenet-{which}", *sys.argv[2:]]
    sys.exit((main_dir if which == "dir" else main_shards)(sys.argv[1:]))
