"""The one field picker: "jpg;png" names alternatives, the first one present in a sample wins.

    find_field(sample, "jpg;png")   -> ("png", value), or None when no alternative is present
    pick_field(sample, "jpg;png")   -> value, or SampleError naming the sample, the spec and its fields

Names are matched as written after stripping spaces; extensions are also tried lower-cased ("JPG"
finds "jpg"), names starting with "__" (`__key__`) only as written.
"""

from __future__ import annotations

from typing import Any

from tensorcom.errors import SampleError


def _candidates(name: str) -> tuple[str, ...]:
    name = name.strip()
    lower = name.lower()
    return (name,) if name.startswith("__") or lower == name else (name, lower)


def find_field(sample: dict[str, Any], spec: str) -> tuple[str, Any] | None:
    """(name, value) of the first alternative of `spec` present in `sample`, or None."""
    if not isinstance(spec, str) or not spec.strip(";").strip():
        raise ValueError(f"a field spec is one or more names separated by ';', got {spec!r}")
    for alternative in spec.split(";"):
        for name in _candidates(alternative):
            if name and name in sample:
                return name, sample[name]
    return None


def pick_field(sample: dict[str, Any], spec: str) -> Any:
    """The value of the first alternative of `spec` present in `sample`; SampleError when none is."""
    found = find_field(sample, spec)
    if found is None:
        present = sorted(k for k in sample if not str(k).startswith("__"))
        raise SampleError(f"sample {sample.get('__key__')!r} has none of the fields {spec!r} (it has {present})",
                          url=sample.get("__url__"))
    return found[1]
