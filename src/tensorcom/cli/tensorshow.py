"""tensorshow URL… -o out.png — write a grid of images from the next batch (labels as titles).

    tensorshow zsub://127.0.0.1:7880 -o grid.png --mode imgclass --fields 0,1

--mode imgclass: field A holds images (N,H,W[,C]) or (N,C,H,W), field B the labels shown above each.
--mode img2img: field A holds inputs and field B outputs, shown side by side. Fields are indices or
dict keys (default: the first two). Floats are scaled to 0..255 ([0,1] data by 255, others by their
range). Needs Pillow, no display. The grid is tensorcom.images.grid's.
"""

from __future__ import annotations

import sys

from tensorcom.cli.common import Parser, add_source_arguments, entry_point, open_source, positive_int


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Parse arguments, receive one batch, write the grid to -o, exit 0."""
    parser = Parser(prog="tensorshow", description=__doc__.splitlines()[0])
    add_source_arguments(parser)
    parser.add_argument("-o", "--output", required=True, help="PNG (or any Pillow format) to write")
    parser.add_argument("--mode", choices=("imgclass", "img2img"), default="imgclass")
    parser.add_argument("--fields", default="", help="comma-separated field indices or keys (default: first two)")
    parser.add_argument("--count", type=positive_int, default=64, metavar="N", help="show at most N images (default 64)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with open_source(args) as conn:
        batch = conn.recv()
    from tensorcom.images.grid import render

    image = render(batch, args.mode, [f for f in args.fields.split(",") if f], args.count)
    image.save(args.output)
    print(f"wrote {args.output} ({image.width}x{image.height})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
