"""The functions of WebDataset's field stages, for `Pipeline.map`: decode, rename, map_dict, map_tuple.

    SampleDecoder(decoder, handler, counts)   dict sample → decoded dict, or None when `handler` skips
                                              it (Pipeline.decode drops those with `kept`)
    Renamer({"image": "jpg;png"}, keep=True)  dict sample → fields renamed ("jpg;png": first present)
    DictMapper({"cls": int})                  dict sample → the same dict with fn applied to those fields
    TupleMapper((fn0, None, fn2))             tuple sample → fn_i applied to item i (None: unchanged)

Each is a small picklable object applied to one sample at a time, so these stages run wherever a
map runs (threads, processes, `parallel`) and hold no state of their own. Decoding is
tensorcom.shards.fields.Decoder (one decoder per format); field names and "jpg;png" alternatives are
parsed and looked up by tensorcom.fieldspec, with its one missing-field rule (SampleError).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tensorcom.errors import SampleError
from tensorcom.fieldspec import field_names, find_field, missing_field, one_field, pick_field
from tensorcom.shards.handlers import Handler, SkipCounts, handle

if TYPE_CHECKING:  # a SampleDecoder unpickled in a worker brings its Decoder's module with it
    from tensorcom.shards.fields import Decoder


class SampleDecoder:
    """decoder(sample); a SampleError goes to the bad-data policy `handler` (None: raise), which may
    skip the sample: then the skip is counted in `counts` ("samples") and None is returned. (Counts
    kept in worker processes stay there.)"""

    def __init__(self, decoder: Decoder, handler: Handler | None = None, counts: SkipCounts | None = None):
        self.decoder, self.handler, self.counts = decoder, handler, counts

    def __call__(self, sample: dict) -> dict | None:
        if not isinstance(sample, dict):
            raise TypeError(f"decode() takes dict samples, not {type(sample).__name__}")
        try:
            return self.decoder(sample)
        except SampleError as exn:
            handle(exn, self.handler, self.counts, "samples")
            return None

    def __repr__(self) -> str:
        return f"SampleDecoder({self.decoder!r}, handler={getattr(self.handler, '__name__', self.handler)})"


def kept(sample: Any) -> bool:
    """False for the None that SampleDecoder returns for a skipped sample."""
    return sample is not None


def _require_dict(sample: Any, stage: str) -> dict:
    if not isinstance(sample, dict):
        raise TypeError(f"{stage}() takes dict samples, not {type(sample).__name__}")
    return sample


class Renamer:
    """Fields renamed as `spec` says, {new name: "old1;old2"}: the new field takes the first old one
    present (SampleError when none is). `keep=True` keeps the other fields (the old names are
    dropped); `keep=False` keeps only the new ones and `__key__` / `__url__`."""

    def __init__(self, spec: dict[str, str], keep: bool = True):
        if not spec or not all(isinstance(v, str) for v in spec.values()):
            raise ValueError(f"rename needs new=\"old1;old2\" pairs, got {spec!r}")
        self.spec, self.keep = {new: one_field(old) for new, old in spec.items()}, keep
        self.old = field_names(self.spec.values())

    def __call__(self, sample: dict) -> dict:
        sample = _require_dict(sample, "rename")
        renamed = {new: pick_field(sample, old) for new, old in self.spec.items()}
        if self.keep:
            result = {k: v for k, v in sample.items() if k not in self.old}
        else:
            result = {k: v for k, v in sample.items() if k in ("__key__", "__url__")}
        result.update(renamed)
        return result

    def __repr__(self) -> str:
        return f"Renamer({self.spec!r}, keep={self.keep})"


class DictMapper:
    """A copy of the dict sample with fns[field](value) for each field of `fns`; a missing field is a
    SampleError naming it."""

    def __init__(self, fns: dict[str, Callable[[Any], Any]]):
        if not fns or not all(callable(fn) for fn in fns.values()):
            raise TypeError(f"map_dict needs field=callable pairs, got {fns!r}")
        self.fns = dict(fns)

    def __call__(self, sample: dict) -> dict:
        result = dict(_require_dict(sample, "map_dict"))
        for name, fn in self.fns.items():
            found = find_field(result, (name,))
            if found is None:
                raise missing_field(result, (name,))
            result[found[0]] = fn(found[1])
        return result

    def __repr__(self) -> str:
        return f"DictMapper({self.fns!r})"


class TupleMapper:
    """The tuple with fns[i](item i) for each i (None: item i unchanged; items past len(fns) too)."""

    def __init__(self, fns: Sequence[Callable[[Any], Any] | None]):
        if not fns or not all(fn is None or callable(fn) for fn in fns):
            raise TypeError(f"map_tuple needs callables (or None), got {fns!r}")
        self.fns = tuple(fns)

    def __call__(self, sample: tuple | list) -> tuple:
        if not isinstance(sample, (tuple, list)):
            raise TypeError(f"map_tuple() takes tuple samples, not {type(sample).__name__}")
        return tuple(item if i >= len(self.fns) or self.fns[i] is None else self.fns[i](item)
                     for i, item in enumerate(sample))

    def __repr__(self) -> str:
        return f"TupleMapper({self.fns!r})"
