"""tensorshow URL… -o out.png — write a grid of images from the next batch (labels as titles).

    tensorshow zsub://127.0.0.1:7880 -o grid.png
    tensorshow zsub://127.0.0.1:7880 -o grid.png --mode imgclass --fields 0,1 --classes classes.txt

--mode imgclass: field A holds images (N,H,W[,C]) or (N,C,H,W), field B the labels shown above each.
--mode img2img: field A holds inputs and field B outputs, shown side by side. Fields are indices or
dict keys; by default A is the first field that is a batch of images (uint8 or float, rank 4, 1/3/4
channels) and B the first other field with one label per image (img2img: the next image field).
Integer labels are shown as class names from --classes (one name a line) or from a `__classes__` or
`names` list the batch carries; else as numbers. Floats are scaled to 0..255 ([0,1] data by 255,
others by their range). Needs Pillow, no display. The grid is tensorcom.images.grid's.
"""

from __future__ import annotations

import sys

from tensorcom.cli.common import Parser, add_source_arguments, entry_point, open_source, positive_int
from tensorcom.extras import require


def build_parser() -> Parser:
    """Command line of tensorshow."""
    parser = Parser(prog="tensorshow", description=__doc__.splitlines()[0])
    add_source_arguments(parser)
    parser.add_argument("-o", "--output", required=True, help="PNG (or any Pillow format) to write")
    parser.add_argument("--mode", choices=("imgclass", "img2img"), default="imgclass",
                        help="imgclass: images with their labels as titles; img2img: each input image "
                        "beside its output image (default imgclass)")
    parser.add_argument("--fields", default="", metavar="A[,B]",
                        help="comma-separated field indices or keys: images, then labels (imgclass) or "
                        "output images (img2img); default: the first image field and the first label field")
    parser.add_argument("--classes", default=None, metavar="FILE",
                        help="class names, one a line (line i names label i); default: the batch's "
                        "__classes__ or names list if it has one, else labels are shown as numbers")
    parser.add_argument("--count", type=positive_int, default=64, metavar="N", help="show at most N images (default 64)")
    return parser


def read_classes(path: str | None) -> list[str] | None:
    """The class names in `path`, one a line (trailing blank lines dropped), or None without a path."""
    if path is None:
        return None
    with open(path, encoding="utf-8") as stream:
        return stream.read().rstrip("\n").split("\n")


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Parse arguments, receive one batch, write the grid to -o, exit 0."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    require("PIL")  # before waiting for a batch
    classes = read_classes(args.classes)
    with open_source(args) as conn:
        batch = conn.recv()
    from tensorcom.images.grid import choose, draw

    choice = choose(batch, args.mode, [f for f in args.fields.split(",") if f], classes)
    image = draw(batch, choice, args.mode, args.count)
    image.save(args.output)
    print(f"wrote {args.output} ({image.width}x{image.height}): {choice.describe(args.mode)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
