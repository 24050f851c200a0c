"""`tensorcom` umbrella command: `tensorcom SUBCOMMAND [ARGS]` runs the tool module named for it."""

from __future__ import annotations

import importlib
import sys

from tensorcom.checks import did_you_mean
from tensorcom.cli.common import fail

# subcommand -> (module, function, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("tensorcom.cli.demo", "main", "make a small dataset, serve it on loopback, train on it"),
    "serve": ("tensorcom.cli.serve", "main", "serve MODULE:FUNCTION's pipeline to URLs"),
    "mon": ("tensorcom.cli.tensormon", "main", "same as tensormon"),
    "stat": ("tensorcom.cli.tensorstat", "main", "same as tensorstat"),
    "show": ("tensorcom.cli.tensorshow", "main", "same as tensorshow"),
    "shard": ("tensorcom.cli.shard", "main", "convert an image folder, table or dataset into tar or Parquet shards"),
    "prepare": ("tensorcom.cli.prepare", "main", "decode a folder's or shards' images into a cache ahead of training"),
    "keys": ("tensorcom.cli.keys", "main", "make a CURVE key pair for secured streams (docs/security.md)"),
}


def usage() -> str:
    """The help text listing every subcommand."""
    lines = ["usage: tensorcom SUBCOMMAND [ARGS...]", "", "subcommands:"]
    lines += [f"  {name:<8} {help_}" for name, (_, _, help_) in SUBCOMMANDS.items()]
    lines += ["  version  print the version"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int | None:
    """Dispatch argv[0] to its subcommand's main with the remaining arguments; a missing or unknown
    subcommand is one stderr line (with the closest name) and exit status 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    names = [*SUBCOMMANDS, "version"]
    if not argv:
        fail(f"missing SUBCOMMAND, one of {', '.join(names)} (see tensorcom --help)", prog="tensorcom")
    if argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name in ("version", "--version"):
        from tensorcom import __version__

        print(__version__)
        return 0
    if name not in SUBCOMMANDS:
        fail(f"unknown subcommand {name!r}{did_you_mean(name, names)} (see tensorcom --help)", prog="tensorcom")
    module_name, function, _ = SUBCOMMANDS[name]
    sys.argv = [f"tensorcom {name}", *rest]
    return getattr(importlib.import_module(module_name), function)(rest)


if __name__ == "__main__":
    sys.exit(main())
