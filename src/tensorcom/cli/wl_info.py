"""wl-info URL [-c N]: summarize the first N samples: key sets, and per field its types, dtypes,
shapes, byte sizes and value range.

    wl-info 'data-{000..009}.tar' -c 500
    wl-info data.tar --json          # one JSON object, for scripts
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tensorcom.cli import wlcommon
from tensorcom.cli.common import entry_point


@dataclass
class FieldInfo:
    """What one field looked like over the samples seen."""

    count: int = 0
    types: set[str] = field(default_factory=set)
    dtypes: set[str] = field(default_factory=set)
    shapes: set[tuple] = field(default_factory=set)
    lengths: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    lo: Any = None
    hi: Any = None

    def add(self, raw: Any, value: Any) -> None:
        """Record one raw value (bytes, for its size) and its decoded form."""
        self.count += 1
        self.types.add(type(value).__name__)
        if isinstance(raw, (bytes, bytearray, memoryview)):
            self.sizes.append(len(raw))
        if hasattr(value, "dtype") and hasattr(value, "shape"):
            self.dtypes.add(str(value.dtype))
            self.shapes.add(tuple(value.shape))
            if value.size and value.dtype.kind in "biuf":
                self._extend(value.min().item(), value.max().item())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            self._extend(value, value)
        elif hasattr(value, "__len__"):
            self.lengths.append(len(value))
            if hasattr(value, "size") and hasattr(value, "mode"):  # PIL image
                self.shapes.add((value.size[1], value.size[0], len(value.getbands())))

    def _extend(self, lo: Any, hi: Any) -> None:
        """Widen the value range to include [lo, hi]."""
        self.lo = lo if self.lo is None else min(self.lo, lo)
        self.hi = hi if self.hi is None else max(self.hi, hi)

    def summary(self) -> dict[str, Any]:
        """A JSON-compatible summary: count, types, dtypes, shapes, bytes, len, range (as present)."""
        out: dict[str, Any] = {"count": self.count, "types": sorted(self.types)}
        if self.dtypes:
            out["dtypes"] = sorted(self.dtypes)
        if self.shapes:
            out["shapes"] = _spread([list(s) for s in sorted(self.shapes)])
        if self.sizes:
            out["bytes"] = {"min": min(self.sizes), "mean": round(sum(self.sizes) / len(self.sizes), 1),
                            "max": max(self.sizes), "total": sum(self.sizes)}
        if self.lengths:
            out["len"] = [min(self.lengths), max(self.lengths)]
        if self.lo is not None:
            out["range"] = [self.lo, self.hi]
        return out


def _spread(shapes: list[list[int]], limit: int = 5) -> list:
    """Up to `limit` distinct shapes, else [smallest, "...", largest] in sorted order."""
    return shapes if len(shapes) <= limit else [shapes[0], "...", shapes[-1]]


def survey(samples, image: str) -> tuple[Counter, dict[str, FieldInfo]]:
    """Key-set counts and per-field info over raw `samples`, decoding each with `image`."""
    keysets: Counter = Counter()
    fields: dict[str, FieldInfo] = {}
    for raw in samples:
        decoded = wlcommon.decode(raw, image)
        keysets[" ".join(sorted(k for k in raw if not k.startswith("__")))] += 1
        for key, value in decoded.items():
            if key.startswith("__"):
                continue
            fields.setdefault(key, FieldInfo()).add(raw.get(key), value)
    return keysets, fields


def parse(argv: list[str] | None):
    """Parsed arguments: url, count, skip, decode, json."""
    parser = wlcommon.make_parser("wl-info", __doc__)
    wlcommon.add_range_args(parser, count_default=1000)
    parser.add_argument("-d", "--decode", choices=wlcommon.DECODE_CHOICES, default="rgb8",
                        help="how to decode images before looking at them; 'none' keeps raw bytes (default: rgb8)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser.parse_args(argv)


def report(keysets: Counter, fields: dict[str, FieldInfo]) -> str:
    """The human-readable report."""
    lines = [f"samples\t{sum(keysets.values())}", "keysets"]
    lines += [f"\t{n}\t{{{names}}}" for names, n in keysets.most_common()]
    for name in sorted(fields):
        lines.append(f"\n{name}")
        lines += [f"\t{item}\t{_text(item, value)}" for item, value in fields[name].summary().items()]
    return "\n".join(lines)


def _text(item: str, value: Any) -> str:
    """One summary entry as text: shapes as HxWxC, ranges as "lo .. hi", dicts as k=v."""
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    if item == "shapes":
        return ", ".join(s if isinstance(s, str) else "x".join(map(str, s)) or "()" for s in value)
    if item in ("len", "range"):
        return f"{value[0]} .. {value[1]}"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Survey URL and print the report."""
    args = parse(argv)
    keysets, fields = survey(wlcommon.samples(args.url, skip=args.skip, count=args.count,
                                              require_end_blocks=args.require_end_blocks), args.decode)
    if args.json:
        keys = [{"fields": names.split(), "count": n} for names, n in keysets.most_common()]
        doc = {"samples": sum(keysets.values()), "keysets": keys,
               "fields": {name: fields[name].summary() for name in sorted(fields)}}
        print(json.dumps(doc))
    else:
        print(report(keysets, fields))
    return 0
