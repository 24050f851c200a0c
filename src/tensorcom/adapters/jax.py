"""JAX adapter: received batches as jax arrays, placed on one device or sharded over the local ones.

    import tensorcom
    from tensorcom.adapters.jax import batch_sharding, iterate

    sharding = batch_sharding()              # the batch axis split over jax.local_devices()
    for epoch in range(epochs):
        for images, labels in iterate(conn, sharding=sharding):
            state, loss = train_step(state, images, labels)

`iterate(source)` reads one pass of `source` (a Connection, a Pipeline, any iterable of batches),
puts each array field on the device with `jax.device_put` and yields the batch in the container it
came in (list, tuple or dict); plain values (`__key__`), lists and string arrays pass through. It
keeps `prefetch` batches in flight, so copying the next batches overlaps the step on this one.
`ToJax(sharding=...)` is the same conversion as a batch converter (`Connection(converters=ToJax())`),
`to_jax(batch, ...)` for one batch.

Placement: `sharding=None` puts arrays on `device` (default: jax's default device). A
`jax.sharding.Sharding` places every array of rank >= 1 with it; `batch_sharding(devices)` is a
NamedSharding over a 1-d mesh ("batch") of the local devices that splits the leading (batch) axis,
so each device holds N / len(devices) rows (N must divide evenly: a ValueError says so otherwise);
rank-0 arrays are replicated. jax is imported when a conversion runs or a sharding is made, not
when this module is imported.
"""

from __future__ import annotations

import collections
from typing import Any, Iterable, Iterator

import numpy as np

BATCH_AXIS = "batch"


def _jax() -> Any:
    """The jax module; MissingDependency naming tensorcom[jax] without it."""
    from tensorcom.extras import require

    return require("jax")


def batch_sharding(devices: Any = None, axis: str = BATCH_AXIS) -> Any:
    """A NamedSharding over a 1-d mesh of `devices` (default: jax.local_devices()) named `axis`, with
    PartitionSpec(axis): arrays are split along their leading axis, one slice per device."""
    jax = _jax()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = list(jax.local_devices() if devices is None else devices)
    if not devices:
        raise ValueError("batch_sharding needs at least one device")
    return NamedSharding(Mesh(np.array(devices), (axis,)), PartitionSpec(axis))


class ToJax:
    """A batch converter: a list, tuple or dict batch → the same container with every numeric array
    as a jax array placed by `sharding` or on `device` (module docstring); other fields unchanged.

    The transfer is asynchronous (jax.device_put): the returned arrays are usable at once and the copy
    finishes in the background. Pickles when its sharding and device do.
    """

    def __init__(self, sharding: Any = None, device: Any = None):
        if sharding is not None and device is not None:
            raise ValueError("give sharding or device, not both")
        self.sharding, self.device = sharding, device

    def convert_batch(self, batch: Any) -> Any:
        """Convert one batch; TypeError for anything but a list, tuple or dict, ValueError when a
        sharded array's leading axis does not divide over the devices."""
        if isinstance(batch, dict):
            return {key: self.convert_field(key, value) for key, value in batch.items()}
        if isinstance(batch, (list, tuple)):
            return type(batch)(self.convert_field(i, value) for i, value in enumerate(batch))
        raise TypeError(f"a batch must be a list, tuple or dict, not {type(batch).__name__}")

    __call__ = convert_batch

    def convert_field(self, key: Any, value: Any) -> Any:
        """One field → a jax array on its device(s); non-numeric values are returned unchanged."""
        if not (isinstance(value, np.ndarray) and value.dtype.kind in "biuf") and not _is_jax_array(value):
            return value
        jax = _jax()
        placement = self.device if self.sharding is None else self._placement(value)
        try:
            return jax.device_put(value, placement)
        except ValueError as exc:  # jax's IndivisibleError: the rows do not split over the devices
            raise ValueError(f"field {key!r} of shape {tuple(value.shape)} cannot be placed with {self.sharding} "
                             f"(is the batch size a multiple of the device count?): {exc}") from exc

    def _placement(self, value: Any) -> Any:
        """`sharding`, or for a rank-0 array the same mesh replicated (nothing to split)."""
        from jax.sharding import NamedSharding, PartitionSpec

        if value.ndim == 0 and isinstance(self.sharding, NamedSharding):
            return NamedSharding(self.sharding.mesh, PartitionSpec())
        return self.sharding

    def __repr__(self) -> str:
        return f"ToJax(sharding={self.sharding!r}, device={self.device!r})"


def _is_jax_array(value: Any) -> bool:
    """True for a jax.Array, tested without importing jax."""
    return type(value).__module__.startswith("jax") and hasattr(value, "addressable_shards")


def to_jax(batch: Any, *, sharding: Any = None, device: Any = None) -> Any:
    """Convert one batch as `ToJax(sharding, device)` does."""
    return ToJax(sharding, device)(batch)


def iterate(source: Iterable[Any], *, sharding: Any = None, device: Any = None, prefetch: int = 2) -> Iterator[Any]:
    """One pass of `source` (`for batch in source`), each batch converted by ToJax(sharding, device),
    with up to `prefetch` (>= 0) converted batches in flight ahead of the one yielded. The pass ends
    when the source's does: for a Connection at its end-of-epoch marker; iterate again for the next."""
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
        raise ValueError(f"prefetch must be a non-negative int, got {prefetch!r}")
    convert = ToJax(sharding, device)
    ahead: collections.deque = collections.deque()
    for batch in source:
        ahead.append(convert(batch))
        if len(ahead) > prefetch:
            yield ahead.popleft()
    while ahead:
        yield ahead.popleft()
