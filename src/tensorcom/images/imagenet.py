"""The ImageNet-style training pipelines that serve-imagenet-dir and serve-imagenet-shards serve.

    dir_pipeline(root, batch_size=64, ...)      ImageFolder tree -> [images, labels] batches
    shards_pipeline(urls, batch_size=64, ...)   tar shards (jpg/png + cls) -> [images, labels] batches
    benchmark_pipeline(pipeline)                the first batch of `pipeline`, over and over
    dataset_root(path)                          a checked directory, DIR/train when that exists

Every batch is `[images, labels]` (a list, as tensorcom 0.1 sent): images uint8 (N, SIZE, SIZE, 3)
(float32 ImageNet-normalized with `normalize`), labels int32 (N,); each image is augmented with
RandomResizedCrop(SIZE, scale=(min_scale, 1)) + horizontal flip, its randomness drawn from the
pipeline's seed. The samples are batched first, as they come (file names, or a shard's bytes), and
each batch is then augmented and collated as one task (AugmentBatch): inline when `workers` is 0, else
on that many spawned processes kept across epochs (an ordered `Pipeline.map`), so only whole batches
cross to the consumer; with `workers="auto"` (or tensorcom.pipeline.autoscale.Elastic(min, max)) on
a pool that grows and shrinks as it runs. Which images form a batch and every random draw depend on the seed, the epoch
and the portion only, never on `workers`: a server may resume with another `-w`.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Callable, Iterator

import numpy as np

from tensorcom.pipeline import Pipeline

IMAGE_FIELDS = ("jpg", "jpeg", "png", "ppm", "webp")


class Augment:
    """Picklable map function: an image sample dict -> (image array, int32 label).

    Takes the first of IMAGE_FIELDS as the image bytes (or reads the file named by `__path__` when
    there is none, so worker processes do their own reads) and `cls` as the label (bytes or str digits,
    or an int); applies RandomResizedCrop(size, scale=(min_scale, 1)) + flip, and ImageNet
    normalization to float32 when `normalize`. The transform is built lazily in whichever process runs
    it; with `dedicated` (a process that only serves data) and `size` >= TORCH_RESIZE_MIN, that
    process's torch is first set to one thread (images.init_worker), which enables the fast resize
    (smaller outputs keep Pillow's: importing torch costs ~2 s of CPU per process, more than a small
    resize saves over a whole run). With a `cache` (a
    tensorcom.images.decoded_cache.DecodedCache) the image is the decoded array it maps from a file (or
    decodes and stores), wherever this runs.
    """

    FIELDS = IMAGE_FIELDS
    TORCH_RESIZE_MIN = 128  # output sides from which a dedicated process imports torch for its resize

    def __init__(self, size: int, normalize: bool = False, min_scale: float = 0.08, dedicated: bool = False,
                 cache: Callable[[dict], dict] | None = None):
        self.size, self.normalize, self.min_scale, self.dedicated = size, normalize, min_scale, dedicated
        self.cache = cache
        self._transform: Callable | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_transform": None}

    def transform(self) -> Callable:
        """The images.train_transform this object applies (built on first use)."""
        if self._transform is None:
            from tensorcom.images.augment import train_transform
            from tensorcom.images.resample import init_worker

            if self.dedicated and self.size >= self.TORCH_RESIZE_MIN:
                init_worker()
            dtype = "float32" if self.normalize else "uint8"
            self._transform = train_transform(self.size, dtype=dtype, scale=(self.min_scale, 1.0))
        return self._transform

    def __call__(self, sample: dict, rng: np.random.Generator,
                 out: np.ndarray | None = None) -> tuple[np.ndarray, np.int32]:
        """(image, label) of `sample`; with `out` (e.g. a batch's row) the image is written there."""
        if self.cache is not None:
            sample = self.cache(sample)
        return self.transform()(image_bytes(sample), rng, out), np.int32(label_of(sample))


def image_bytes(sample: dict) -> bytes:
    """The encoded image of a sample: its first IMAGE_FIELDS field, else the file at `__path__`
    (an ImageFolderSource(read=False) sample). KeyError naming the key and fields when it has neither."""
    data = next((sample[name] for name in IMAGE_FIELDS if name in sample), None)
    if data is None and "__path__" in sample:
        with open(sample["__path__"], "rb") as stream:
            data = stream.read()
    if data is None:
        raise KeyError(f"sample {sample.get('__key__')!r} has no image field ({'/'.join(IMAGE_FIELDS)}); "
                       f"it has {sorted(sample)}")
    return data


def label_of(sample: dict) -> int:
    """The integer class of a sample's `cls` field (int, or bytes/str of decimal digits)."""
    value = sample.get("cls")
    if value is None:
        raise KeyError(f"sample {sample.get('__key__')!r} has no 'cls' field; it has {sorted(sample)}")
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value).decode("ascii")
    return int(value)


def dataset_root(path: str | os.PathLike) -> str:
    """`path` when it is a directory (ValueError naming it otherwise); DIR/train when that exists."""
    if not os.path.isdir(path):
        raise ValueError(f"dataset directory {os.fspath(path)!r} does not exist or is not a directory")
    from tensorcom.images.folder import image_folder_root

    return os.fspath(image_folder_root(path))


def dir_pipeline(root: str, *, batch_size: int, size: int = 224, shuffle: bool = True, normalize: bool = False,
                 workers: Any = 0, seed: int = 0, min_scale: float = 0.08, dedicated: bool = False,
                 cache: str | None = None, cache_max_side: int | None = None,
                 cache_max_bytes: int | None = None) -> Pipeline:
    """The Pipeline serve-imagenet-dir serves: ImageFolder `root` -> augmented [images, labels] batches,
    in shuffled (or, without `shuffle`, file) order. `dedicated`: the processes iterating it only
    serve data (see Augment). `cache`: a directory of decoded images (decoded_cache)."""
    from tensorcom.images.folder import ImageFolderSource

    # Augment reads each file where it runs; the tree is scanned once, here, not in every process
    source = ImageFolderSource(root, shuffle=shuffle, read=False)
    source.items()
    pipeline = Pipeline(source, seed=seed)
    decoded = decoded_cache(source, cache, cache_max_side, cache_max_bytes)
    return augmented_batches(pipeline, Augment(size, normalize, min_scale, dedicated, decoded), batch_size, workers)


def shards_pipeline(urls: str, *, batch_size: int, size: int = 224, shuffle: bool = False, shuffle_buffer: int = 1000,
                    normalize: bool = False, workers: Any = 0, seed: int = 0, min_scale: float = 0.08,
                    dedicated: bool = False, cache: str | None = None, cache_max_side: int | None = None,
                    cache_max_bytes: int | None = None) -> Pipeline:
    """The Pipeline serve-imagenet-shards serves: tar shards `urls` (brace-expanded) -> augmented
    [images, labels] batches; `shuffle` shuffles the shards and then the samples through a buffer of
    `shuffle_buffer`. `dedicated`: the processes iterating it only serve data (see Augment). `cache`:
    a directory of decoded images (decoded_cache)."""
    from tensorcom.pipeline.sources import ShardSource

    source = ShardSource(urls, shuffle=shuffle) if shuffle else ShardSource(urls)
    pipeline = Pipeline(source, seed=seed)
    if shuffle:
        pipeline = pipeline.shuffle(shuffle_buffer)
    decoded = decoded_cache(source, cache, cache_max_side, cache_max_bytes)
    return augmented_batches(pipeline, Augment(size, normalize, min_scale, dedicated, decoded), batch_size, workers)


def decoded_cache(source: Any, directory: str | None, max_side: int | None, max_bytes: int | None) -> Any:
    """The tensorcom.images.decoded_cache.DecodedCache of `source`'s images under `directory` (None without
    one): Augment then maps each image decoded (shorter side <= max_side) from a file, or decodes and
    stores it (up to max_bytes). The rng draws are those of the pipeline without a cache, and an
    image that was a hit, a miss or did not fit gives the same bits."""
    if directory is None:
        return None
    from tensorcom.images.decoded_cache import decoded_cache as make

    return make(source, directory, max_side=max_side, max_bytes=max_bytes)


def augmented_batches(pipeline: Pipeline, augment: Augment, batch_size: int, workers: Any) -> Pipeline:
    """`pipeline` batched as it comes, then each batch augmented and collated by AugmentBatch: inline
    when `workers` is 0, else on `workers` spawned processes in order (whole batches cross back); with
    "auto" (or an autoscale.Elastic) on a pool of processes that grows and shrinks as it runs."""
    from tensorcom.pipeline.autoscale import Elastic

    batches = pipeline.batch(batch_size, collate=list)
    processes = Elastic.of(workers) is not None or workers > 0
    return batches.map(AugmentBatch(augment), rng=True, workers=workers, processes=processes)


class AugmentBatch:
    """Picklable map function: a list of image samples and the batch's generator -> [images, labels]
    (as collate_pair stacks them), sample i augmented by `augment` with the i-th generator spawned
    from the batch's, so its draws depend on the batch's key (seed, epoch, portion, batch position)
    and i only. Every image after the first is written straight into its row of the batch."""

    def __init__(self, augment: Augment):
        self.augment = augment

    def __call__(self, samples: list[dict], rng: np.random.Generator) -> list[np.ndarray]:
        images, labels = None, np.empty(len(samples), np.int32)
        for i, (sample, own) in enumerate(zip(samples, rng.spawn(len(samples)))):
            image, labels[i] = self.augment(sample, own, None if images is None else images[i])
            if images is None:
                images = np.empty((len(samples), *image.shape), image.dtype)
                images[0] = image
        return [images, labels]


def collate_pair(samples: list[tuple[np.ndarray, np.int32]]) -> list[np.ndarray]:
    """[(image, label), ...] -> [images (N, ...), labels int32 (N,)] (a list, as tensorcom 0.1 sent)."""
    images = np.stack([image for image, _ in samples])
    return [images, np.array([label for _, label in samples], dtype=np.int32)]


class Preloaded:
    """A re-iterable that yields the first batch of `pipeline` `times` times (forever when None).

    The batch is computed once, in whichever process iterates, so that only the transport is measured.
    Picklable (it holds the pipeline, not the batch).
    """

    def __init__(self, pipeline: Pipeline, times: int | None):
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


def benchmark_pipeline(pipeline: Pipeline, seed: int = 0) -> Pipeline:
    """A Pipeline serving `pipeline`'s first batch over and over, an epoch being as many batches as
    `pipeline` yields (1000 when its length is unknown)."""
    times = pipeline.length()
    return Pipeline(Preloaded(pipeline, times if times else 1000), seed=seed)
