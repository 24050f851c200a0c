"""Field specs: which fields of a dict sample to take, and the one rule for a field a sample lacks.

    parse_fields("jpg;png cls")           -> (("jpg", "png"), ("cls",))
    find_field(sample, "jpg;png")         -> ("png", value) for the first alternative present, or None
    pick_field(sample, "jpg;png")         -> value, or SampleError (missing_field)
    pick_fields(sample, "jpg;png cls")    -> (value, value): one per field, in order (to_tuple)
    select_fields(sample, spec, missing="raise", counts=None, keys="first")   -> dict of the fields

The grammar, the same in shards.to_tuple, Pipeline.select / to_tuple / rename and the wl-* tools:
- a spec is a string or a sequence of strings (or of already parsed fields: tuples of alternatives);
- fields within one string are separated by spaces and/or commas: "jpg cls", "jpg,cls", "jpg, cls";
- alternatives within one field are separated by ";": "jpg;png" takes the first one present;
- names are matched as written, and extensions also lower-cased ("JPG" finds "jpg"); names starting
  with "__" (`__key__`, `__url__`) only as written.
An empty spec, or one with an empty field, is a ValueError naming it.

The missing-field rule: a sample that has none of a field's alternatives raises SampleError (a
ShardError: `url` is the sample's `__url__`) naming the field, its alternatives, the sample's `__key__`
and the fields it has. The one opt-out is `select_fields(..., missing="skip", counts=counter)`, for
tools that explicitly ask to skip: the field is left out and counted in `counts[field text]`.

Pure (standard library and tensorcom.errors only).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, MutableMapping, Sequence

from tensorcom.checks import choice
from tensorcom.errors import SampleError

Field = tuple[str, ...]  # the alternatives of one field, in order of preference
Spec = str | Sequence[str | Field]

_SEPARATORS = re.compile(r"[\s,]+")


def parse_fields(spec: Spec, where: str = "a field spec") -> tuple[Field, ...]:
    """The fields of `spec` in order, each a tuple of alternatives (module docstring: the grammar);
    ValueError naming `where` for an empty spec or field, TypeError for a spec that is not text."""
    parts = [spec] if isinstance(spec, str) else list(spec) if isinstance(spec, (list, tuple)) else None
    if parts is None:
        raise TypeError(f"{where}: a field spec is a string or a sequence of strings, not {type(spec).__name__}")
    fields: list[Field] = []
    for part in parts:
        if isinstance(part, tuple):
            part = ";".join(part)
        if not isinstance(part, str):
            raise TypeError(f"{where}: field names are strings, got {part!r}")
        for text in _SEPARATORS.split(part.strip()):
            alternatives = tuple(name for name in text.split(";") if name)
            if not alternatives:
                raise ValueError(f"{where} needs one or more field names, got {spec!r}")
            fields.append(alternatives)
    if not fields:
        raise ValueError(f"{where} needs one or more field names, got {spec!r}")
    return tuple(fields)


def one_field(field: str | Field) -> Field:
    """The alternatives of a single field ("jpg;png" or a tuple); ValueError for several fields."""
    fields = parse_fields([field])
    if len(fields) != 1:
        raise ValueError(f"expected one field (alternatives separated by ';'), got {field!r}")
    return fields[0]


def field_text(field: str | Field) -> str:
    """One field as written: "jpg;png"."""
    return ";".join(one_field(field))


def _candidates(name: str) -> tuple[str, ...]:
    lower = name.lower()
    return (name,) if name.startswith("__") or lower == name else (name, lower)


def find_field(sample: dict[str, Any], field: str | Field) -> tuple[str, Any] | None:
    """(name, value) of the first alternative of `field` present in `sample`, or None: the one lookup."""
    for alternative in one_field(field):
        for name in _candidates(alternative):
            if name in sample:
                return name, sample[name]
    return None


def missing_field(sample: dict[str, Any], field: str | Field) -> SampleError:
    """The SampleError of the missing-field rule: the field, its alternatives, the sample's key, url and fields."""
    alternatives = one_field(field)
    present = sorted(str(k) for k in sample if not str(k).startswith("__"))
    which = f"field {alternatives[0]!r}" if len(alternatives) == 1 else \
        f"field {field_text(alternatives)!r} (none of its alternatives {list(alternatives)})"
    return SampleError(f"sample {sample.get('__key__')!r} has no {which}; it has {present}", url=sample.get("__url__"))


def pick_field(sample: dict[str, Any], field: str | Field) -> Any:
    """The value of the first alternative of `field` present in `sample`; missing_field's error when none is."""
    found = find_field(sample, field)
    if found is None:
        raise missing_field(sample, field)
    return found[1]


def pick_fields(sample: dict[str, Any], spec: Spec) -> tuple:
    """The values of the fields of `spec`, in order (a dict sample → a tuple sample)."""
    if not isinstance(sample, dict):
        raise TypeError(f"fields are picked from dict samples, not {type(sample).__name__}")
    return tuple(pick_field(sample, field) for field in parse_fields(spec))


def select_fields(sample: dict[str, Any], spec: Spec, *, missing: str = "raise",
                  counts: MutableMapping[str, int] | None = None, keys: str = "first") -> dict:
    """The sample restricted to the fields of `spec`, plus its `__key__` and `__url__` when present.

    Each field is stored under its first alternative (`keys="first"`: the same keys for every sample,
    as batching needs) or under the name found (`keys="found"`: "png" for "jpg;png", as tools that
    write files by extension need). A missing field raises (the rule), or with `missing="skip"` is
    left out and counted in `counts[field text]`."""
    choice("missing", missing, ("raise", "skip"))
    choice("keys", keys, ("first", "found"))
    if not isinstance(sample, dict):
        raise TypeError(f"fields are selected from dict samples, not {type(sample).__name__}")
    chosen = {k: sample[k] for k in ("__key__", "__url__") if k in sample}
    for field in parse_fields(spec):
        found = find_field(sample, field)
        if found is not None:
            chosen[field[0] if keys == "first" else found[0]] = found[1]
        elif missing == "raise":
            raise missing_field(sample, field)
        elif counts is not None:
            counts[field_text(field)] = counts.get(field_text(field), 0) + 1
    return chosen


def field_names(fields: Iterable[Field]) -> set[str]:
    """Every alternative named by parsed `fields`."""
    return {name for field in fields for name in field}
