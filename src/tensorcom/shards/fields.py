"""Sample fields ⇄ bytes, chosen by file extension (the last dot-component of the field name).

    cls cls2 class count index inx id   int             (ASCII decimal)
    txt text transcript html htm        str             (UTF-8)
    json jsn                            JSON value
    mp msgpack msg                      msgpack value
    npy / npz                           ndarray / dict of ndarrays (never pickled objects)
    ten tenbin tb                       list of ndarrays (tenbin buffer)
    jpg jpeg png ppm pgm pbm webp tif tiff bmp   image: see decode_image's modes
    pyd pickle pkl / pth                pickle / torch.save: only with allow_pickle=True, else left as bytes
    X.gz                                gzip'ed X: decompressed, then decoded as X (the field keeps its name)

Anything else stays bytes. JPEG decodes through simplejpeg when it is installed (Pillow otherwise); both
are imported on first use.
"""

from __future__ import annotations

import gzip
import io
import json
from typing import Any, Callable

import numpy as np

from tensorcom.errors import SampleError

INT_EXTS = frozenset("cls cls2 class count index inx id".split())
TEXT_EXTS = frozenset("txt text transcript html htm".split())
IMAGE_EXTS = frozenset("jpg jpeg png ppm pgm pbm webp tif tiff bmp".split())
PICKLE_EXTS = frozenset("pyd pickle pkl".split())
# mode -> (array kind, PIL mode)
IMAGE_MODES: dict[str, tuple[str, str]] = {
    "rgb8": ("uint8", "RGB"), "rgb": ("float", "RGB"), "l8": ("uint8", "L"), "l": ("float", "L"),
    "rgba8": ("uint8", "RGBA"), "rgba": ("float", "RGBA"),
    "pil": ("pil", "RGB"), "pilrgb": ("pil", "RGB"), "pill": ("pil", "L"), "pilrgba": ("pil", "RGBA"),
}
_PIL_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "ppm": "PPM", "pgm": "PPM", "pbm": "PPM",
                "webp": "WEBP", "tif": "TIFF", "tiff": "TIFF", "bmp": "BMP"}


def _decode_simplejpeg(data: bytes, pil_mode: str) -> np.ndarray | None:
    try:
        import simplejpeg
    except ImportError:
        return None
    try:
        array = simplejpeg.decode_jpeg(data, colorspace="GRAY" if pil_mode == "L" else "RGB")
    except ValueError:  # CMYK and other JPEGs libjpeg-turbo's fast path refuses: let Pillow try
        return None
    return array[:, :, 0] if pil_mode == "L" else array


def decode_image(data: bytes, mode: str = "rgb8") -> Any:
    """Decode image bytes (any format Pillow reads) to an array or PIL image.

    Modes: "rgb8" uint8 (H, W, 3); "rgb" float32 in [0, 1]; "l8" / "l" grayscale (H, W); "rgba8" /
    "rgba"; "pil" / "pilrgb" / "pill" / "pilrgba" PIL images. Raises SampleError for undecodable bytes.
    """
    try:
        kind, pil_mode = IMAGE_MODES[mode]
    except (KeyError, TypeError):
        raise ValueError(f"unknown image mode {mode!r}; use one of {sorted(IMAGE_MODES)}") from None
    array = None
    if kind != "pil" and pil_mode != "RGBA" and bytes(data[:3]) == b"\xff\xd8\xff":
        array = _decode_simplejpeg(data, pil_mode)
    if array is None:
        image = _open_pil(data, pil_mode)
        if kind == "pil":
            return image
        array = np.asarray(image)
    return array.astype(np.float32) / np.float32(255.0) if kind == "float" else array


def _open_pil(data: bytes, pil_mode: str) -> Any:
    import PIL.Image

    try:
        image = PIL.Image.open(io.BytesIO(data))
        image.load()
    except (OSError, SyntaxError, ValueError) as exn:  # PIL.UnidentifiedImageError is an OSError
        raise SampleError(f"cannot decode image ({len(data)} bytes): {exn}") from exn
    return image if image.mode == pil_mode else image.convert(pil_mode)


def encode_image(image: Any, ext: str = "png", quality: int = 95) -> bytes:
    """Encode an ndarray (uint8, or float in [0, 1]; (H, W), (H, W, 1|3|4)) or a PIL image as `ext`."""
    import PIL.Image

    fmt = _PIL_FORMATS.get(ext.lower())
    if fmt is None:
        raise ValueError(f"no image format for extension {ext!r}")
    if isinstance(image, np.ndarray):
        image = PIL.Image.fromarray(_as_uint8_image(image))
    if not isinstance(image, PIL.Image.Image):
        raise TypeError(f"cannot encode {type(image).__name__} as an image (.{ext})")
    if fmt == "JPEG" and image.mode not in ("RGB", "L", "CMYK"):
        image = image.convert("RGB")
    out = io.BytesIO()
    image.save(out, format=fmt, **({"quality": quality} if fmt in ("JPEG", "WEBP") else {}))
    return out.getvalue()


def _as_uint8_image(array: np.ndarray) -> np.ndarray:
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)):
        raise ValueError(f"image arrays must be (H, W) or (H, W, 1|3|4), not {array.shape}")
    if array.dtype.kind == "f":
        if array.size and (array.min() < -0.001 or array.max() > 1.001):
            raise ValueError(f"float images must lie in [0, 1], not [{array.min()}, {array.max()}]")
        return (np.clip(array, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    if array.dtype != np.uint8:
        raise ValueError(f"image arrays must be uint8 or float, not {array.dtype}")
    return array


def _npy_loads(data: bytes) -> np.ndarray:
    return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)


def _npz_loads(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _msgpack_loads(data: bytes) -> Any:
    import msgpack

    return msgpack.unpackb(data, raw=False)


def _tenbin_loads(data: bytes) -> list[np.ndarray]:
    from tensorcom import tenbin

    return tenbin.decode_buffer(data)


def _pickle_loads(data: bytes) -> Any:
    import pickle

    return pickle.loads(data)


def _torch_loads(data: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


DECODERS: dict[str, Callable[[bytes], Any]] = {
    **{ext: (lambda data: int(data)) for ext in INT_EXTS},
    **{ext: (lambda data: bytes(data).decode("utf-8")) for ext in TEXT_EXTS},
    "json": json.loads, "jsn": json.loads,
    "mp": _msgpack_loads, "msgpack": _msgpack_loads, "msg": _msgpack_loads,
    "npy": _npy_loads, "npz": _npz_loads,
    "ten": _tenbin_loads, "tenbin": _tenbin_loads, "tb": _tenbin_loads,
}
UNSAFE_DECODERS: dict[str, Callable[[bytes], Any]] = {
    **{ext: _pickle_loads for ext in PICKLE_EXTS}, "pth": _torch_loads,
}


def decode_field(ext: str, data: bytes, image: str | None = "rgb8", allow_pickle: bool = False) -> Any:
    """Decode one field's bytes by its extension `ext` (e.g. "jpg", "seg.png", "txt.gz").

    `image=None` leaves images as bytes. Pickle-based fields stay bytes unless `allow_pickle`.
    Unknown extensions stay bytes. Errors propagate (decode_sample adds the context).
    """
    ext = ext.lower()
    if isinstance(data, memoryview):  # int(), json and msgpack take bytes, not views
        data = data.tobytes()
    if ext.endswith(".gz"):
        data, ext = gzip.decompress(data), ext[:-3]
    last = ext.rsplit(".", 1)[-1]
    if last in IMAGE_EXTS:
        return decode_image(data, image) if image else data
    decoder = DECODERS.get(last) or (UNSAFE_DECODERS.get(last) if allow_pickle else None)
    return decoder(data) if decoder else data


def decode_sample(sample: dict[str, Any], image: str | None = "rgb8", allow_pickle: bool = False,
                  only: set[str] | None = None) -> dict[str, Any]:
    """A new dict with every bytes field decoded by its extension (see the module table).

    `__key__`-style fields and values that are not bytes are kept as they are; `only` limits decoding
    to those fields. Raises SampleError naming the shard URL, the sample key and the field.
    """
    if image is not None and image not in IMAGE_MODES:
        raise ValueError(f"unknown image mode {image!r}; use one of {sorted(IMAGE_MODES)}")
    result = {}
    for name, value in sample.items():
        if name[:2] == "__" or not isinstance(value, (bytes, bytearray, memoryview)) or (
                only is not None and name not in only):
            result[name] = value
            continue
        try:
            result[name] = decode_field(name, value, image=image, allow_pickle=allow_pickle)
        except Exception as exn:
            key = sample.get("__key__")
            raise SampleError(f"cannot decode field {name!r}: {type(exn).__name__}: {exn}",
                              url=sample.get("__url__"), member=f"{key}.{name}") from exn
    return result


def _int_dumps(value: Any) -> bytes:
    if isinstance(value, (bool, float)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"an integer field needs an int, not {type(value).__name__}: {value!r}")
    return str(int(value)).encode("ascii")


def _npy_dumps(value: Any) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, np.asarray(value), allow_pickle=False)
    return out.getvalue()


def _npz_dumps(value: Any) -> bytes:
    if not isinstance(value, dict):
        raise TypeError(f"an npz field needs a dict of arrays, not {type(value).__name__}")
    out = io.BytesIO()
    np.savez_compressed(out, **{k: np.asarray(v) for k, v in value.items()})
    return out.getvalue()


def _msgpack_dumps(value: Any) -> bytes:
    import msgpack

    return msgpack.packb(value, use_bin_type=True)


def _tenbin_dumps(value: Any) -> bytes:
    from tensorcom import tenbin

    return bytes(tenbin.encode_buffer(list(value) if isinstance(value, (list, tuple)) else [value]))


def _pickle_dumps(value: Any) -> bytes:
    import pickle

    return pickle.dumps(value)


def _torch_dumps(value: Any) -> bytes:
    import torch

    out = io.BytesIO()
    torch.save(value, out)
    return out.getvalue()


ENCODERS: dict[str, Callable[[Any], bytes]] = {
    **{ext: _int_dumps for ext in INT_EXTS},
    "json": lambda v: json.dumps(v).encode("utf-8"), "jsn": lambda v: json.dumps(v).encode("utf-8"),
    "mp": _msgpack_dumps, "msgpack": _msgpack_dumps, "msg": _msgpack_dumps,
    "npy": _npy_dumps, "npz": _npz_dumps,
    "ten": _tenbin_dumps, "tenbin": _tenbin_dumps, "tb": _tenbin_dumps,
}
UNSAFE_ENCODERS: dict[str, Callable[[Any], bytes]] = {
    **{ext: _pickle_dumps for ext in PICKLE_EXTS}, "pth": _torch_dumps,
}


def encode_field(ext: str, value: Any, allow_pickle: bool = False) -> bytes:
    """Bytes for one field: bytes as they are, str as UTF-8, other values encoded by extension
    (the inverse of decode_field; X.gz is gzip'ed with a fixed mtime). Raises TypeError when the
    extension has no encoder for the value."""
    ext = ext.lower()
    if ext.endswith(".gz"):
        return gzip.compress(encode_field(ext[:-3], value, allow_pickle), mtime=0)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    last = ext.rsplit(".", 1)[-1]
    if last in IMAGE_EXTS:
        return encode_image(value, last)
    encoder = ENCODERS.get(last) or (UNSAFE_ENCODERS.get(last) if allow_pickle else None)
    if encoder is None:
        hint = " (pass allow_pickle=True)" if last in UNSAFE_ENCODERS else ""
        raise TypeError(f"no encoder for {type(value).__name__} values in .{ext} fields{hint}")
    return encoder(value)


def encode_sample(sample: dict[str, Any], allow_pickle: bool = False) -> dict[str, Any]:
    """A new dict with every field encoded to bytes by encode_field; `__key__`-style fields stay as
    they are. Raises TypeError / ValueError naming the field."""
    result = {}
    for name, value in sample.items():
        if name[:2] == "__":
            result[name] = value
            continue
        try:
            result[name] = encode_field(name, value, allow_pickle=allow_pickle)
        except (TypeError, ValueError) as exn:
            message = f"field {name!r} of sample {sample.get('__key__')!r}: {exn}"
            try:
                error = type(exn)(message)
            except TypeError:  # a class that wants other arguments, like UnicodeEncodeError
                error = TypeError(message) if isinstance(exn, TypeError) else ValueError(message)
            raise error from exn
    return result
