"""Sample fields ⇄ bytes, chosen by file extension (the last dot-component of the field name).

    cls cls2 class count index inx id   int             (ASCII decimal)
    txt text transcript html htm        str             (UTF-8)
    json jsn                            JSON value
    mp msgpack msg                      msgpack value
    npy / npz                           ndarray / dict of ndarrays (never pickled objects)
    ten tenbin tb                       list of ndarrays (tenbin buffer)
    jpg jpeg png ppm pgm pbm webp tif tiff bmp   image: see tensorcom.imagecodec's modes
    pyd pickle pkl / pth                pickle / torch.save: only with allow_pickle=True, else left as bytes
    X.gz                                gzip'ed X: decompressed, then decoded as X (the field keeps its name)

Anything else stays bytes. Images decode through tensorcom.imagecodec (the package's one
decoder per image format). `Decoder` decodes samples WebDataset-style, with a list of handlers.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from tensorcom.errors import MissingDependency, SampleError
from tensorcom.imagecodec import IMAGE_MODES, decode_image, encode_image, image_mode

__all__ = [  # decode_image, encode_image and IMAGE_MODES are tensorcom.imagecodec's, for callers here
    "DECODERS", "ENCODERS", "IMAGE_EXTS", "IMAGE_MODES", "Decoder", "ExtensionHandler", "ImageHandler",
    "decode_field", "decode_image", "decode_sample", "encode_field", "encode_image", "encode_sample",
    "handle_extension",
]

INT_EXTS = frozenset(["cls", "cls2", "class", "count", "index", "inx", "id"])
TEXT_EXTS = frozenset(["txt", "text", "transcript", "html", "htm"])
IMAGE_EXTS = frozenset(["jpg", "jpeg", "png", "ppm", "pgm", "pbm", "webp", "tif", "tiff", "bmp"])
PICKLE_EXTS = frozenset(["pyd", "pickle", "pkl"])
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


JSON_EXTS, MSGPACK_EXTS, TENBIN_EXTS = ("json", "jsn"), ("mp", "msgpack", "msg"), ("ten", "tenbin", "tb")


def _every_spelling(json_codec: Callable, msgpack_codec: Callable, tenbin_codec: Callable) -> dict[str, Callable]:
    """{extension: codec} for every spelling of the JSON, msgpack and tenbin extensions."""
    pairs = ((JSON_EXTS, json_codec), (MSGPACK_EXTS, msgpack_codec), (TENBIN_EXTS, tenbin_codec))
    return {ext: codec for exts, codec in pairs for ext in exts}


DECODERS: dict[str, Callable[[bytes], Any]] = {
    **{ext: (lambda data: int(data)) for ext in INT_EXTS},
    **{ext: (lambda data: bytes(data).decode("utf-8")) for ext in TEXT_EXTS},
    **_every_spelling(json.loads, _msgpack_loads, _tenbin_loads), "npy": _npy_loads, "npz": _npz_loads,
}
UNSAFE_DECODERS: dict[str, Callable[[bytes], Any]] = {
    **{ext: _pickle_loads for ext in PICKLE_EXTS}, "pth": _torch_loads,
}


def decode_field(ext: str, data: bytes, image: str | None = "rgb8", allow_pickle: bool = False) -> Any:
    """Decode one field's bytes by its extension `ext` (e.g. "jpg", "seg.png", "txt.gz").

    `image=None` leaves images as bytes. Pickle-based fields stay bytes unless `allow_pickle`.
    Unknown extensions stay bytes. Errors propagate (decode_sample adds the context).
    """
    return Decoder(*([image] if image else []), allow_pickle=allow_pickle).decode_field(ext, data)


def _by_extension(name: str, data: bytes, allow_pickle: bool) -> Any:
    """The default decoding of a (decompressed) field: the decoder of its last extension, else bytes."""
    last = name.rsplit(".", 1)[-1]
    decoder = DECODERS.get(last) or (UNSAFE_DECODERS.get(last) if allow_pickle else None)
    return decoder(data) if decoder else data


FieldHandler = Callable[[str, bytes], Any]  # (field name, bytes) -> value, or None: not mine


class ImageHandler:
    """Field handler that decodes image fields (jpg, png, ...: IMAGE_EXTS, by the last extension) with
    decode_image in `mode` (any name of IMAGE_MODES); returns None for other fields."""

    def __init__(self, mode: str):
        image_mode(mode)  # ValueError for an unknown mode, when the decoder is built
        self.mode = mode

    def __call__(self, name: str, data: bytes) -> Any:
        return decode_image(data, self.mode) if name.rsplit(".", 1)[-1] in IMAGE_EXTS else None

    def __repr__(self) -> str:
        return f"ImageHandler({self.mode!r})"


class ExtensionHandler:
    """Field handler applying fn(bytes) to fields whose name ends in one of `extensions` (a list, or
    one string split on spaces: "jpg png", "seg.png"); None for other fields. WebDataset's
    `handle_extension`."""

    def __init__(self, extensions: str | list[str], fn: Callable[[bytes], Any]):
        names = extensions.split() if isinstance(extensions, str) else list(extensions)
        if not names or not callable(fn):
            raise ValueError(f"ExtensionHandler needs extensions and a callable, got {extensions!r}, {fn!r}")
        self.suffixes = tuple(name.lower().split(".") for name in names)
        self.fn = fn

    def __call__(self, name: str, data: bytes) -> Any:
        parts = name.split(".")
        if any(parts[-len(suffix):] == suffix for suffix in self.suffixes):
            return self.fn(data)
        return None


handle_extension = ExtensionHandler  # WebDataset's name


class Decoder:
    """Decode dict samples field by field, as WebDataset's Decoder does.

    `handlers`: image mode names ("rgb8", "torch", "pil", ...: an ImageHandler each) and callables
    (field name, bytes) -> value or None, tried in order for each bytes field; the first result that
    is not None is the field's value. The name a handler sees is the field's, lower-cased, with a
    ".gz" suffix already removed (and the data decompressed). A field no handler takes gets the
    default decoding by extension (decode_field without images: images stay bytes unless a handler
    decodes them). `only` limits decoding to those fields. Calling the decoder returns a new dict;
    `__key__`-style fields and values that are not bytes are kept. Raises SampleError naming the
    shard URL, the sample key and the field. Picklable when its callables are.
    """

    def __init__(self, *handlers: str | FieldHandler, allow_pickle: bool = False,
                 only: set[str] | None = None):
        self.handlers = [ImageHandler(h) if isinstance(h, str) else h for h in handlers]
        for handler in self.handlers:
            if not callable(handler):
                raise TypeError(f"a decode handler is an image mode or a callable, not {handler!r}")
        self.allow_pickle, self.only = allow_pickle, only

    def decode_field(self, name: str, data: bytes) -> Any:
        """The value of one field `name` with bytes `data` (see the class docstring)."""
        name = name.lower()
        if isinstance(data, (memoryview, bytearray)):  # int(), json and msgpack take bytes, not views
            data = bytes(data)
        if name.endswith(".gz"):
            data, name = gzip.decompress(data), name[:-3]
        for handler in self.handlers:
            value = handler(name, data)
            if value is not None:
                return value
        return _by_extension(name, data, self.allow_pickle)

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        result = {}
        for name, value in sample.items():
            if name[:2] == "__" or not isinstance(value, (bytes, bytearray, memoryview)) or (
                    self.only is not None and name not in self.only):
                result[name] = value
                continue
            try:
                result[name] = self.decode_field(name, value)
            except MissingDependency:
                raise  # a missing Pillow (say) is not bad data: no handler may skip it
            except Exception as exn:
                key = sample.get("__key__")
                raise SampleError(f"cannot decode field {name!r}: {type(exn).__name__}: {exn}",
                                  url=sample.get("__url__"), member=f"{key}.{name}") from exn
        return result

    def __repr__(self) -> str:
        return f"Decoder({', '.join(map(repr, self.handlers))})"


def decode_sample(sample: dict[str, Any], image: str | None = "rgb8", allow_pickle: bool = False,
                  only: set[str] | None = None) -> dict[str, Any]:
    """A new dict with every bytes field decoded by its extension (see the module table), images in
    mode `image` (None: left as bytes): Decoder(image, allow_pickle=..., only=...)(sample)."""
    return Decoder(*([image] if image is not None else []), allow_pickle=allow_pickle, only=only)(sample)


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
    **_every_spelling(lambda v: json.dumps(v).encode("utf-8"), _msgpack_dumps, _tenbin_dumps),
    "npy": _npy_dumps, "npz": _npz_dumps,
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
