"""tensorstat URL… — receive --count batches, then print each input's dtype, shapes and statistics.

    tensorstat zsub://127.0.0.1:7880 --count 20

One line per input (field index, or key for dict batches): dtype, the distinct shapes seen, and
min / max / mean / std over all elements of all batches. Plain values (e.g. `__key__` lists) are
listed with their Python type.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from tensorcom.cli.common import Parser, add_source_arguments, entry_point, open_source, positive_int


class FieldStats:
    """Running statistics of one input: dtypes, shapes, min, max, sum, sum of squares, element count."""

    def __init__(self):
        self.dtypes: list[str] = []
        self.shapes: list[tuple] = []
        self.low, self.high = np.inf, -np.inf
        self.total = self.squares = 0.0
        self.n = 0

    def add(self, value: Any) -> None:
        """Fold one batch's value of this input into the statistics."""
        if not isinstance(value, np.ndarray):
            kind = type(value).__name__
            if kind not in self.dtypes:
                self.dtypes.append(kind)
            return
        if value.dtype.name not in self.dtypes:
            self.dtypes.append(value.dtype.name)
        if value.shape not in self.shapes:
            self.shapes.append(value.shape)
        if value.size == 0 or value.dtype.kind not in "biuf":
            return
        data = value.astype(np.float64, copy=False)
        self.low = min(self.low, float(data.min()))
        self.high = max(self.high, float(data.max()))
        self.total += float(data.sum())
        self.squares += float(np.square(data).sum())
        self.n += value.size

    def describe(self, name: str) -> str:
        """One line for this input."""
        text = f"{name}: dtype {','.join(self.dtypes)}"
        if self.shapes:
            text += " shapes " + " ".join(str(tuple(s)) for s in self.shapes[:5])
            text += " ..." if len(self.shapes) > 5 else ""
        if self.n:
            mean = self.total / self.n
            std = max(self.squares / self.n - mean * mean, 0.0) ** 0.5
            text += f" min {self.low:.6g} max {self.high:.6g} mean {mean:.6g} std {std:.6g}"
        return text


def collect(conn: Any, count: int) -> dict:
    """Receive `count` batches; returns {field name: FieldStats} in field order."""
    fields: dict = {}
    for _ in range(count):
        batch = conn.recv()
        items = batch.items() if isinstance(batch, dict) else enumerate(batch)
        for name, value in items:
            fields.setdefault(name, FieldStats()).add(value)
    return fields


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Parse arguments, gather statistics over --count batches, print them, exit 0."""
    parser = Parser(prog="tensorstat", description=__doc__.splitlines()[0])
    add_source_arguments(parser)
    parser.add_argument("--count", type=positive_int, default=10, metavar="N", help="batches to look at (default 10)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with open_source(args) as conn:
        fields = collect(conn, args.count)
    print(f"{args.count} batches")
    for name, stats in fields.items():
        print(stats.describe(str(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
