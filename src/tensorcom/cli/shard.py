"""tensorcom shard INPUT -o PATTERN (also wl-shard): convert a dataset into tar (or Parquet) shards.

    tensorcom shard /data/imagenet/train -o 'shards/train-%06d.tar' --maxcount 5000 -j 8
    tensorcom shard table.parquet -o 'shards/part-%04d.parquet' --format parquet --maxsize 1G
    tensorcom shard saved_hf_dataset --split train -o 'shards/hf-%04d.tar'
    tensorcom shard mymodule:samples -o 'shards/gen-%04d.tar' --resume

INPUT is a directory of class folders (image files stored as their bytes, class index as `cls`), a
Parquet or Arrow IPC file or a directory of them, a Hugging Face dataset saved with save_to_disk, or
MODULE:FUNC / FILE.py:FUNC, a function yielding sample dicts. Shard n always holds the same samples,
whatever -j says; shards appear under their names only once complete; PATTERN's manifest
(out/train.manifest.json for out/train-%06d.tar) lets --resume keep the shards already finished.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from tensorcom.cli import common
from tensorcom.cli.common import entry_point
from tensorcom.errors import OpenError
from tensorcom.pipeline.shard_writing import convert
from tensorcom.shards.convert import FORMATS, ConvertInput, FilesInput, IterableInput, manifest_path

TABLE_EXTENSIONS = (".parquet", ".arrow", ".feather", ".ipc")
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def byte_size(text: str) -> float:
    """argparse type: a positive byte count, `3e9`, `500M`, `2G` (powers of 1000)."""
    match = re.fullmatch(r"\s*([0-9.e+]+)\s*([kmgt]?)b?\s*", text.lower())
    try:
        value = float(match.group(1)) * _UNITS[match.group(2)] if match else 0.0
    except ValueError:
        value = 0.0
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"must be a positive byte count like 3e9 or 500M, not {text!r}")
    return value


def parse(argv: list[str] | None):
    """Parsed arguments: input, output, format, maxcount, maxsize, processes, resume, split, quiet."""
    parser = common.Parser(prog="tensorcom shard", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="class-folder directory, Parquet file or directory, saved Hugging Face "
                        "dataset, or MODULE:FUNC yielding sample dicts")
    parser.add_argument("-o", "--output", required=True, help="shard pattern with %%d, like 'out/train-%%06d.tar'")
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="shard format (default: from the pattern's extension, else tar)")
    parser.add_argument("--maxcount", type=common.positive_int, default=10000,
                        help="samples per shard (default: 10000)")
    parser.add_argument("--maxsize", type=byte_size, default=None,
                        help="bytes per shard, planned from the input's sizes (3e9, 500M; default: no limit)")
    parser.add_argument("-j", "--processes", type=common.positive_int, default=1,
                        help="processes writing shards (default: 1); the shards are the same for any number")
    parser.add_argument("--resume", action="store_true",
                        help="keep the finished shards of an interrupted run of the same command and input")
    parser.add_argument("--split", default=None, help="split of a saved Hugging Face DatasetDict (default: train)")
    common.add_quiet_argument(parser, "progress bar or periodic progress lines")
    return parser.parse_args(argv)


def open_input(spec: str, split: str | None = None) -> ConvertInput:
    """The ConvertInput that `spec` names (see the module docstring); OpenError for a path that is not there."""
    if os.path.isdir(spec):
        names = set(os.listdir(spec))
        if names & {"dataset_info.json", "dataset_dict.json", "state.json"}:
            from tensorcom.shards.convert_tables import HuggingFaceInput

            return HuggingFaceInput(spec, split)
        if any(name.endswith(TABLE_EXTENSIONS) for name in names):
            from tensorcom.shards.convert_tables import TableInput

            return TableInput(spec)
        from tensorcom.images.folder import ImageFolder

        folder = ImageFolder(spec)
        return FilesInput(folder.samples, folder.root)
    if spec.endswith(TABLE_EXTENSIONS) or os.path.isfile(spec):
        from tensorcom.shards.convert_tables import TableInput

        return TableInput(spec)
    if ":" in spec and not spec.startswith(("/", ".")):
        from tensorcom.pipeline.function_spec import load_function

        return IterableInput(load_function(spec, "input function"), name=spec)
    raise OpenError("no such directory or file, and not MODULE:FUNC", url=spec)


@entry_point
def main(argv: list[str] | None = None) -> int:
    """Convert INPUT into shards; one summary line on stdout."""
    args = parse(argv)
    format = args.format or ("parquet" if args.output.endswith(".parquet") else "tar")
    source = open_input(args.input, args.split)
    manifest = convert(source, args.output, maxcount=args.maxcount, maxsize=args.maxsize, format=format,
                       processes=args.processes, resume=args.resume, progress=not args.quiet)
    total = sum(shard.count for shard in manifest.shards)
    kept = f" ({len(manifest.kept)} kept)" if args.resume else ""
    shards = f"{len(manifest.shards)} shard" + "s" * (len(manifest.shards) != 1)
    print(f"tensorcom shard: {total} samples in {shards}{kept}, "
          f"manifest {manifest_path(args.output)}", file=sys.stdout)
    return 0
