"""wl-dump URL -o DIR [-c COUNT] [--fields ...]: write each sample's fields as files DIR/KEY.EXT.

    wl-dump 'data-{000..009}.tar' -o /tmp/look -c 20 --fields jpg cls

Field bytes are written as stored (no decoding). A "/" in a key becomes "%2F", as in WebLoader's
wl-dump, so every file lands directly in DIR.
"""

from __future__ import annotations

import os
import sys

from tensorcom.cli import wlcommon
from tensorcom.cli.common import entry_point


def parse(argv: list[str] | None):
    """Parsed arguments: url, output, fields, count, skip, verbose."""
    parser = wlcommon.make_parser("wl-dump", __doc__)
    parser.add_argument("-o", "--output", required=True, help="directory to write into (created if needed)")
    parser.add_argument("-f", "--fields", nargs="+", default=None,
                        help="fields to write, comma/space separated, 'jpg;png' for alternatives (default: all)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each file written")
    wlcommon.add_range_args(parser)
    return parser.parse_args(argv)


def file_name(key: str, ext: str) -> str:
    """The file name for field `ext` of the sample `key`: KEY.EXT with "/" quoted as %2F."""
    name = f"{key}.{ext}".replace("%", "%25").replace("/", "%2F")
    if name.startswith("."):  # an empty key would make a hidden file
        name = "%2E" + name[1:]
    return name


def dump(sample: dict, directory: str, fields: list[str] | None) -> list[str]:
    """Write the chosen fields of `sample` into `directory`; returns the paths written."""
    key = str(sample.get("__key__", ""))
    written = []
    for ext, value in wlcommon.select_fields(sample, fields).items():
        if ext.startswith("__"):
            continue
        path = os.path.join(directory, file_name(key, ext))
        with open(path, "wb") as stream:
            stream.write(wlcommon.field_bytes(value))
        written.append(path)
    return written


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Dump the samples of URL into the output directory; prints a count on stderr."""
    args = parse(argv)
    fields = wlcommon.parse_fields(args.fields)
    os.makedirs(args.output, exist_ok=True)
    nsamples = nfiles = 0
    for sample in wlcommon.samples(args.url, skip=args.skip, count=args.count,
                                   require_end_blocks=args.require_end_blocks):
        paths = dump(sample, args.output, fields)
        if args.verbose:
            print("\n".join(paths))
        nsamples += 1
        nfiles += len(paths)
    print(f"wl-dump: wrote {nfiles} files from {nsamples} samples to {args.output}", file=sys.stderr)
    return 0
