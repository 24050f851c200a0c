"""What the command-line tools share: turning our errors into one stderr line and an exit status,
argparse types, and the URL… / --timeout arguments of the receiving tools (tensormon, tensorstat,
tensorshow)."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import TYPE_CHECKING, Callable

from tensorcom.errors import TensorcomError

if TYPE_CHECKING:
    from tensorcom.transport.connection import Connection

EXIT_USAGE = 2
DEFAULT_SOURCE_URL = "zsub://127.0.0.1:7880"


def fail(message: str, status: int = EXIT_USAGE) -> None:
    """Print `message` as one line on stderr, prefixed with the program name, and exit with `status`."""
    prog = sys.argv[0].rsplit("/", 1)[-1] if sys.argv and sys.argv[0] else "tensorcom"
    print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
    raise SystemExit(status)


def entry_point(main: Callable[..., int | None]) -> Callable[..., int | None]:
    """Wrap a tool's main: our errors, ValueError, TimeoutError and OSError become one line and exit
    status 2; Ctrl-C exits 130 quietly; a closed stdout pipe (`| head`) exits 0."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt:
            raise SystemExit(130) from None
        except BrokenPipeError:
            sys.stderr.close()
            raise SystemExit(0) from None
        except (TensorcomError, ValueError, TimeoutError, OSError) as exc:
            fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    return wrapper


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one stderr line and exit status 2 (see `fail`)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        fail(f"{message} (see {self.prog} --help)")


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text!r}")
    return value


def fraction(text: str) -> float:
    """argparse type: a float in (0, 1]."""
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], not {text}")
    return value


def seconds(text: str) -> float:
    """argparse type: a positive number of seconds."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def nonnegative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """URL… (default zsub://127.0.0.1:7880) and --timeout, as every receiving tool takes them."""
    parser.add_argument("urls", nargs="*", metavar="URL", default=[DEFAULT_SOURCE_URL],
                        help=f"where to receive from (brace expansion works; default {DEFAULT_SOURCE_URL})")
    parser.add_argument("--timeout", type=seconds, default=None, metavar="S",
                        help="give up (exit 2) after S seconds without a batch; default: wait forever")


def open_source(args: argparse.Namespace, **kwargs) -> Connection:
    """A receiving Connection for the tool's URLs; malformed URLs raise URLError (exit 2)."""
    from tensorcom.transport.connection import (
        Connection,  # only the receiving tools need ZeroMQ
    )

    return Connection(list(args.urls), timeout=args.timeout, allow64=True, **kwargs)
