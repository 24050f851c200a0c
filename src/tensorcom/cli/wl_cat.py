"""wl-cat URL FIELD [SKIP]: write the raw bytes of one field of one sample to stdout.

    wl-cat 'data-{000..009}.tar' jpg 10 > eleventh.jpg
"""

from __future__ import annotations

from tensorcom.cli import common, wlcommon
from tensorcom.cli.common import entry_point
from tensorcom.fieldspec import pick_field


def parse(argv: list[str] | None):
    """Parsed arguments: url, field, skip."""
    parser = wlcommon.make_parser("wl-cat", __doc__)
    parser.add_argument("field", help="field (extension) to write, alternatives as 'jpg;png'; __key__ allowed")
    parser.add_argument("skip", type=common.nonnegative_int, nargs="?", default=0,
                        help="number of samples to skip first (default: 0)")
    return parser.parse_args(argv)


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Find sample number SKIP of URL and copy its FIELD to stdout; status 2 when there is none."""
    args = parse(argv)
    sample = next(wlcommon.samples(args.url, skip=args.skip, count=1,
                                   require_end_blocks=args.require_end_blocks), None)
    if sample is None:
        raise ValueError(f"{args.url} has no sample after skipping {args.skip}")
    value = pick_field(sample, args.field)  # SampleError naming a missing field
    out = wlcommon.stdout_binary()
    out.write(wlcommon.field_bytes(value))
    out.flush()
    return 0
