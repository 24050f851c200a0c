"""The public API of `tensorcom` is pinned: adding or removing a name must change this test."""

import inspect

import tensorcom
from tensorcom import errors

EXPECTED = [
    "Connection", "CurveKeyError", "DecodeError", "Detached", "EncodeError", "MessageTooLarge", "MissingDependency",
    "OpenError", "PeerLost", "Pipeline", "RecvTimeout", "SampleError", "ShardDataset", "ShardError", "TarFormatError",
    "TensorcomError", "TransportError", "URLError", "Undelivered", "WorkerDied", "WorkerError", "images", "serve",
    "shards", "tenbin", "urls", "wire",
]


def test_all_is_sorted_and_pinned():
    assert tensorcom.__all__ == sorted(tensorcom.__all__)
    assert tensorcom.__all__ == EXPECTED


def test_every_public_name_resolves():
    for name in tensorcom.__all__:
        assert getattr(tensorcom, name) is not None, name


def test_every_error_class_is_exported_as_itself():
    classes = {name for name, value in vars(errors).items()
               if inspect.isclass(value) and issubclass(value, errors.TensorcomError)}
    assert "MessageTooLarge" in classes and classes <= set(tensorcom.__all__)
    for name in classes:
        assert getattr(tensorcom, name) is getattr(errors, name), name


def test_message_too_large_is_a_decode_error():
    assert issubclass(tensorcom.MessageTooLarge, tensorcom.DecodeError)
    assert issubclass(tensorcom.MessageTooLarge, ValueError)


def test_import_is_light():
    from fresh import loaded_by

    assert loaded_by("import tensorcom, tensorcom.transport.connection, tensorcom.shards",
                     ("torch", "PIL", "fsspec")) == []


def test_adapters_are_attributes_but_not_star_exported():
    import tensorcom.adapters.torch

    assert "torch" not in tensorcom.__all__
    assert tensorcom.torch is tensorcom.adapters.torch
