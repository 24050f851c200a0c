"""wl-extract URL -f FIELDS [--json] [-c COUNT]: print chosen fields of each sample, one line each.

    wl-extract 'data-{000..009}.tar' -f __key__,cls,txt         # tab-separated
    wl-extract data.tar -f "__key__ json" --json -c 10           # JSON lines

Text, integer and JSON fields are decoded; other binary fields print as "<N bytes>".
"""

from __future__ import annotations

import json
import sys

from tensorcom.cli import wlcommon
from tensorcom.cli.common import entry_point
from tensorcom.fieldspec import Field, field_text, find_field


def parse(argv: list[str] | None):
    """Parsed arguments: url, fields, json, count, skip, missing."""
    parser = wlcommon.make_parser("wl-extract", __doc__)
    parser.add_argument("-f", "--fields", nargs="+", default=["__key__"],
                        help="fields to print, comma/space separated, 'jpg;png' for alternatives "
                        "(default: __key__)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per sample instead of TSV")
    parser.add_argument("-F", "--format", choices=("tsv", "json"), default=None,
                        help="output format (WebLoader's spelling; --json is the same as -F json)")
    parser.add_argument("--missing", default="",
                        help="what TSV prints for a field the sample lacks (default: empty); JSON prints null")
    wlcommon.add_range_args(parser)
    return parser.parse_args(argv)


def extract(sample: dict, fields: tuple[Field, ...]) -> dict[str, object]:
    """field spec → printable value (None when missing) for one raw sample."""
    out: dict[str, object] = {}
    for field in fields:
        found = find_field(sample, field)  # a missing field prints as --missing / null
        out[field_text(field)] = None if found is None else _value(sample, *found)
    return out


def _value(sample: dict, ext: str, value: object) -> object:
    """The printable value of field `ext` of `sample`: decoded when text, ints or JSON; images as
    "<N bytes>". A field that does not decode is a SampleError naming the shard, key and field."""
    if ext.startswith("__") or not isinstance(value, (bytes, bytearray, memoryview)):
        return wlcommon.plain(value)
    from tensorcom.shards import decode_sample

    where = {k: sample[k] for k in ("__key__", "__url__") if k in sample}
    decoded = decode_sample({**where, ext: bytes(value)}, image=None)[ext]
    return wlcommon.plain(decoded)


def tsv_cell(value: object, missing: str) -> str:
    """One TSV cell: str as is (tabs/newlines escaped), None as `missing`, containers as compact JSON."""
    if value is None:
        return missing
    if isinstance(value, (dict, list)):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Print the chosen fields of each sample of URL on stdout."""
    args = parse(argv)
    fields = wlcommon.parse_fields(args.fields) or (("__key__",),)
    as_json = args.json or args.format == "json"
    for sample in wlcommon.samples(args.url, skip=args.skip, count=args.count,
                                   require_end_blocks=args.require_end_blocks):
        row = extract(sample, fields)
        if as_json:
            line = json.dumps(row, ensure_ascii=False)
        else:
            line = "\t".join(tsv_cell(v, args.missing) for v in row.values())
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return 0
