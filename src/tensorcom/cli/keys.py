"""`tensorcom keys [DIR] [--name NAME]`: make a CURVE key pair for securing tensorcom streams.

Writes DIR/NAME.key_secret (the key pair: keep it private, mode 0600) and DIR/NAME.key (the public
key, to hand to the other side) as ZeroMQ certificates, then prints both paths and the public key.
Never overwrites: an existing file is one stderr line and exit status 2. See docs/security.md.
"""

from __future__ import annotations

import argparse

from tensorcom.cli.common import Parser, entry_point


def build_parser() -> argparse.ArgumentParser:
    """Command line of `tensorcom keys`."""
    parser = Parser(prog="tensorcom keys", description="Make a CURVE key pair: NAME.key_secret (keep it "
                    "private) and NAME.key (public). A sender uses its NAME.key_secret with --curve-secret; "
                    "receivers use the sender's NAME.key with --curve-server.")
    parser.add_argument("directory", nargs="?", default=".", metavar="DIR",
                        help="where to write the files (made if missing; default: the current directory)")
    parser.add_argument("--name", default="tensorcom", help="file name stem (default: tensorcom)")
    return parser


@entry_point
def main(argv: list[str] | None = None) -> int:
    """tensorcom keys: write the pair, print its paths and public key; 0 on success."""
    from tensorcom.transport.security import create_key_pair  # ZeroMQ only once the command line is good

    args = build_parser().parse_args(argv)
    files = create_key_pair(args.directory, args.name)
    print(f"secret key file: {files.secret} (keep it private; for --curve-secret)")
    print(f"public key file: {files.public} (give it to the other side; for --curve-server or --curve-clients)")
    print(f"public key: {files.public_key}")
    return 0
