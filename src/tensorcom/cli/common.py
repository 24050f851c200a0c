"""What every command-line tool shares: turning our errors into one stderr line and an exit status."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Callable

from tensorcom.errors import TensorcomError

EXIT_USAGE = 2


def fail(message: str, status: int = EXIT_USAGE) -> None:
    """Print `message` as one line on stderr, prefixed with the program name, and exit with `status`."""
    prog = sys.argv[0].rsplit("/", 1)[-1] if sys.argv and sys.argv[0] else "tensorcom"
    print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
    raise SystemExit(status)


def entry_point(main: Callable[..., int | None]) -> Callable[..., int | None]:
    """Wrap a tool's main: our errors, ValueError and TimeoutError become one line and exit status 2;
    Ctrl-C exits 130 quietly; a closed stdout pipe (`| head`) exits 0."""

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


def nonnegative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value
