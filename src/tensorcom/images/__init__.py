"""Image decoding and augmentation for training pipelines, and ImageFolder trees.

    decode(data, mode="rgb8")                  bytes -> HWC uint8 ("l8": HW gray; "rgb": float32), by
                                               tensorcom.imagecodec (the package's one pixel codec)
    RandomResizedCrop(224)(data, rng)          bytes or array -> (224, 224, 3) uint8, crop-aware decode
    hflip(image, rng, p=0.5)                   mirror left-right with probability p
    resize(image, shorter_side)                antialiased bilinear resize of the shorter side
    center_crop(image, size)                   central window
    normalize(image, mean, std, dtype, layout) -> float32 / float16 (uint8 kept), HWC or CHW
    train_transform(224, flip=True, ...)       fn(data, rng) -> image, for training
    eval_transform(224, 256, ...)              fn(data, rng=None) -> image, for evaluation
    ImageFolder(root), ImageFolder.from_list(file), image_folder_root(dir)
    ImageFolderSource(root, shuffle=False, read=True)   the tree as a tensorcom.Pipeline source
    init_worker()                              in a loader worker process: enables torch's fast resize
    dir_pipeline(root, batch_size=64), shards_pipeline(urls, batch_size=64)   the ImageNet training
                                               pipelines of serve-imagenet-dir/-shards (images.imagenet)

Speed: the crop is chosen from the JPEG header first; libjpeg-turbo then decodes at the smallest DCT
scale (1, 1/2, 1/4, 1/8) that covers it at the output size (simplejpeg), and only the crop's region
when a libturbojpeg 3 is installed (tensorcom._jpegcrop; `pip install turbojpeg`); one antialiased
bilinear resize cuts the crop out: Pillow's, or torch's (4x faster) in worker processes that called
init_worker() (see tensorcom.images.resample). Randomness comes only from the `rng` arguments; transforms
are picklable. Undecodable bytes raise tensorcom.errors.SampleError.
"""

from __future__ import annotations

from tensorcom.imagecodec import MODES, decode, image_size
from tensorcom.images.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    EvalTransform,
    RandomResizedCrop,
    TrainTransform,
    center_crop,
    eval_transform,
    hflip,
    normalize,
    resize,
    train_transform,
)
from tensorcom.images.folder import IMG_EXTENSIONS, ImageFolder, ImageFolderSource, image_folder_root
from tensorcom.images.imagenet import dir_pipeline, shards_pipeline
from tensorcom.images.resample import BACKENDS, init_worker

__all__ = [
    "BACKENDS",
    "EvalTransform",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "IMG_EXTENSIONS",
    "ImageFolder",
    "ImageFolderSource",
    "MODES",
    "RandomResizedCrop",
    "TrainTransform",
    "center_crop",
    "decode",
    "dir_pipeline",
    "eval_transform",
    "hflip",
    "image_folder_root",
    "image_size",
    "init_worker",
    "normalize",
    "resize",
    "shards_pipeline",
    "train_transform",
]
