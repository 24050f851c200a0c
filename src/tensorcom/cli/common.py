"""What the command-line tools share: turning our errors into one stderr line and an exit status,
one argument parser (usage errors as one line; options before, between and after positionals),
argparse types, `--shuffle/--no-shuffle`, and the URL… / --timeout arguments of the receiving tools
(tensormon, tensorstat, tensorshow)."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import TYPE_CHECKING, Any, Callable

from tensorcom import checks
from tensorcom.checks import did_you_mean
from tensorcom.errors import TensorcomError

if TYPE_CHECKING:
    from tensorcom.pipeline.serve_plan import ServePlan
    from tensorcom.transport.connection import Connection

EXIT_USAGE = 2
DEFAULT_SOURCE_URL = "zsub://127.0.0.1:7880"


def fail(message: str, status: int = EXIT_USAGE, prog: str | None = None) -> None:
    """Print `message` as one line on stderr, prefixed with `prog` (default: the program's name), and
    exit with `status`."""
    if prog is None:
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
    """The ArgumentParser of every tool: usage errors are one stderr line and exit status 2 (see
    `fail`), and options may come before, between and after the positionals (`tensorcom serve mod:fn
    -w 2 URL`; `wl-dump -f jpg cls URL -o DIR`, where the list option gives back the URL it swallowed)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        fail(f"{message} (see {self.prog} --help)", prog=self.prog)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """parse_intermixed_args over `args` (default sys.argv[1:]) after `positionals_first`; an
        unknown option close to a known one is named in the error ("did you mean")."""
        argv = sys.argv[1:] if args is None else list(args)
        parsed, extras = self.parse_known_intermixed_args(positionals_first(self, argv), namespace)
        if extras:
            options = [s for s in self._option_string_actions if s.startswith("--")]
            hint = did_you_mean(extras[0].split("=", 1)[0], options) if _is_option(extras[0]) else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed

    def _check_value(self, action: argparse.Action, value) -> None:
        """argparse's choice check, with the closest choice named ("did you mean")."""
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(repr, action.choices))
            hint = did_you_mean(str(value), map(str, action.choices))
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from {choices}){hint}")


def positionals_first(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`argv` with the positionals that a list option (nargs "+" or "*") swallowed moved to the front.

    A list option takes every word up to the next option, so in `-f a b URL` it takes the URL too.
    When the words outside options are fewer than the required positionals, the last words of the
    last list option are the missing positionals (it keeps at least one). Anything else is unchanged.
    """
    needed = sum(1 for a in parser._actions if not a.option_strings and a.nargs is None)
    found, run, i = 0, None, 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            found += len(argv) - i - 1
            break
        action = _option_action(parser, word)
        if action is None:
            found, i = found + (not _is_option(word)), i + 1
            continue
        end = i + 1 + _values_after(action, word, argv[i + 1:])
        if action.nargs in ("+", "*"):
            run = (i + 1, end)
        i = end
    missing = needed - found
    if missing <= 0 or run is None or run[1] - run[0] <= missing:
        return argv
    cut = run[1] - missing
    return argv[cut:run[1]] + argv[:cut] + argv[run[1]:]


def _is_option(word: str) -> bool:
    """True for a word argparse reads as an option (not `-`, not a negative number)."""
    return word.startswith("-") and word != "-" and not word[1:2].isdigit()


def _option_action(parser: argparse.ArgumentParser, word: str) -> argparse.Action | None:
    """The action of option word `word` (`--name`, `--name=value`, a unique `--na` prefix), or None."""
    if not _is_option(word):
        return None
    name = word.split("=", 1)[0]
    table = parser._option_string_actions
    if name in table:
        return table[name]
    matches = {table[s] for s in table if s.startswith("--") and s.startswith(name) and name.startswith("--")}
    return matches.pop() if len(matches) == 1 else None


def _values_after(action: argparse.Action, word: str, rest: list[str]) -> int:
    """How many of the words `rest` after option `word` are its values."""
    if "=" in word or (not word.startswith("--") and len(word) > 2) or action.nargs == 0:
        return 0  # --name=value, -fVALUE, flags
    words = 0
    while words < len(rest) and not _is_option(rest[words]):
        words += 1
    if action.nargs in ("+", "*"):
        return words
    wanted = 1 if action.nargs in (None, "?") else action.nargs
    return min(words, wanted) if isinstance(wanted, int) else words


def add_shuffle_arguments(parser: argparse.ArgumentParser, default: bool, what: str, buffer: bool = True) -> None:
    """`--shuffle/--no-shuffle` (default `default`) as every server takes it, and with `buffer` the
    size of its shuffle buffer, `--shuffle-buffer N`; `what` says what is shuffled. `-S` meant opposite
    things in tensorcom 0.1's two ImageNet servers: it is refused with a line that says which flag to use."""
    parser.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=default,
                        help=f"shuffle {what} (default: {'--shuffle' if default else '--no-shuffle'})")
    if buffer:
        parser.add_argument("--shuffle-buffer", type=positive_int, default=1000, metavar="N",
                            help="items in the shuffle buffer (default 1000)")
    parser.add_argument("-S", nargs=0, action=Removed, default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                        message="-S is gone: it meant --no-shuffle in serve-imagenet-dir and --shuffle in "
                        "serve-imagenet-shards; say --shuffle or --no-shuffle")


def add_quiet_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """`-q/--quiet`: show no `what` on stderr (dest `quiet`)."""
    parser.add_argument("-q", "--quiet", action="store_true", help=f"show no {what} on stderr")


class Removed(argparse.Action):
    """An option that is no longer accepted: using it fails with `message` (one line, exit 2)."""

    def __init__(self, option_strings, dest, message: str = "", **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.message = message

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        fail(self.message or f"{option_string} is no longer accepted")


def _argument(check: Callable[[str, Any], Any], convert: Callable[[str], Any], text: str) -> Any:
    """argparse's view of a tensorcom.checks rule: `check` on `convert(text)`, its ValueError as an
    ArgumentTypeError."""
    try:
        return check("the value", convert(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error} ({text!r})") from None


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    return _argument(checks.positive, int, text)


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


def metrics_address(text: str) -> str:
    """--metrics HOST:PORT, checked (tensorcom.transport.metrics_http.parse_address)."""
    from tensorcom.transport.metrics_http import parse_address

    try:
        parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def nonnegative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    return _argument(checks.non_negative, int, text)


def count_or_auto(text: str) -> int | str:
    """argparse type: an int >= 0, or "auto"."""
    return "auto" if text == "auto" else nonnegative_int(text)


def add_serving_arguments(parser: argparse.ArgumentParser, count_help: str) -> None:
    """--epochs, --count (`count_help`), -r/--report, -q/--quiet, --resume, --portions, --metrics,
    --no-timing, a sender's CURVE options (--curve-secret, --curve-clients), the sharing options
    (--min-consumers, --replay, --policy) and Ray's (--ray, --address, --ray-cpus), as every server takes them; `serve_plan` reads them back."""
    parser.add_argument("--epochs", type=nonnegative_int, default=0, help="epochs to serve (default 0: forever)")
    parser.add_argument("--count", type=nonnegative_int, default=0, help=count_help)
    parser.add_argument("-r", "--report", type=float, default=10.0,
                        help="seconds between rate reports on stderr (0: none)")
    add_quiet_argument(parser, "rate reports (as -r 0)")
    parser.add_argument("--resume", metavar="FILE",
                        help="send only what the consumer whose state FILE holds has not had (Connection.save_state; "
                             "merge_states for the ranks of a zsplit job), with any number of publishers")
    parser.add_argument("--portions", type=positive_int, default=None, metavar="V",
                        help="split the stream into V portions, fixed for its life, whatever the number of "
                             "publishers (default: one per publisher; with --resume, the state's)")
    parser.add_argument("--metrics", type=metrics_address, default=None, metavar="HOST:PORT",
                        help="serve /metrics (Prometheus), /status.json and a live status page on HOST:PORT "
                             "(port 0: a free one, printed; docs/observability.md; needs tensorcom[metrics])")
    from tensorcom.transport.security import add_curve_arguments

    parser.add_argument("--no-timing", dest="timing", action="store_false",
                        help="do not time the pipeline's stages (the reports then have no stages; "
                             "as $TENSORCOM_TIMING=0)")
    add_curve_arguments(parser, serving=True)
    sharing = parser.add_argument_group("sharing (zshare:// and zsplit:// URLs)")
    sharing.add_argument("--min-consumers", type=positive_int, default=1, metavar="K",
                         help="wait for K consumers to join before the first batch (default 1)")
    sharing.add_argument("--replay", type=positive_int, default=None, metavar="N",
                         help="batches the server keeps for slow and late consumers (default 16)")
    sharing.add_argument("--policy", choices=["pace", "detach"], default=None,
                         help="zshare: wait for the slowest consumer (pace, the default) or detach a consumer "
                              "that falls a whole replay buffer behind")
    cluster = parser.add_argument_group("Ray cluster (docs/ray.md; needs tensorcom[ray])")
    cluster.add_argument("--ray", type=positive_int, default=None, metavar="N",
                         help="serve from N Ray actors, each a disjoint portion, in place of local publisher processes; "
                              "a dead actor is restarted and serves its portion again without loss (zshare/zsplit URLs)")
    cluster.add_argument("--address", default=None, metavar="ADDR",
                         help="the Ray cluster to join (e.g. auto, HEAD:6379); default: the one `ray start` runs "
                              "here, else a new local instance")
    cluster.add_argument("--ray-cpus", type=float, default=1.0, metavar="C",
                         help="CPUs each actor reserves (default 1)")


def serve_plan(args: argparse.Namespace, workers: int | None) -> ServePlan:
    """The ServePlan of a server's parsed command line (URLs, the options of `add_serving_arguments`)
    with `workers` publisher processes (None: one per binding URL, else 1), or with `--ray N` N Ray
    actors (tensorcom.ray.serve) on the cluster `--address` names."""
    from tensorcom.pipeline.serve_plan import DEFAULT_URL, ServePlan
    from tensorcom.transport.security import curve_from_args

    if args.ray is None and args.address is not None:
        raise ValueError("--address names the Ray cluster of --ray N; give --ray N too")
    if args.ray is not None and workers is not None:
        raise ValueError(f"--ray {args.ray} serves from {args.ray} Ray actors in place of publisher processes; "
                         "leave out the publisher count")

    options: dict = {"resume": args.resume}
    if args.portions is not None:
        options["portions"] = args.portions
    if args.metrics is not None:  # with --ray: the driver's figures (tensorcom.ray)
        options["metrics"] = args.metrics
    if not args.timing and args.ray is None:  # Ray actors do not time their stages
        options["timing"] = False
    curve = curve_from_args(args, serving=True)
    if curve is not None:
        options["curve"] = curve
    sharing = {key: value for key, value in (("replay", args.replay), ("policy", args.policy)) if value is not None}
    if args.min_consumers != 1:
        options["min_consumers"] = args.min_consumers
    if sharing:
        options["sharing"] = sharing
    urls, report = args.urls or [DEFAULT_URL], None if args.quiet else args.report or None
    if args.ray is not None:
        from tensorcom.adapters import ray

        ray.check_urls(urls, args.ray)
        serve = functools.partial(ray.serve, address=args.address, resources={"num_cpus": args.ray_cpus})
        return ServePlan(urls, workers=args.ray, epochs=args.epochs or None, count=args.count, report=report,
                         options=options, serve=serve, unit="Ray actor")
    return ServePlan(urls, workers=workers, epochs=args.epochs or None, count=args.count, report=report,
                     options=options)


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """URL… (default zsub://127.0.0.1:7880), --timeout and a receiver's CURVE options (--curve-server,
    --curve-secret), as every receiving tool takes them; `open_source` reads them back."""
    parser.add_argument("urls", nargs="*", metavar="URL", default=[DEFAULT_SOURCE_URL],
                        help=f"where to receive from (brace expansion works; default {DEFAULT_SOURCE_URL})")
    parser.add_argument("--timeout", type=seconds, default=None, metavar="S",
                        help="give up (exit 2) after S seconds without a batch; default: wait forever")
    from tensorcom.transport.security import add_curve_arguments

    add_curve_arguments(parser, serving=False)


def open_source(args: argparse.Namespace, **kwargs) -> Connection:
    """A receiving Connection for the tool's URLs; malformed URLs raise URLError (exit 2)."""
    from tensorcom.transport.connection import Connection  # only the receiving tools need ZeroMQ
    from tensorcom.transport.security import curve_from_args

    return Connection(list(args.urls), timeout=args.timeout, allow64=True, curve=curve_from_args(args, serving=False),
                      **kwargs)
