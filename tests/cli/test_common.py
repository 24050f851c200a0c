"""cli.common's parser: options before, between and after positionals, list options that give back
the positionals they swallowed, one-line usage errors, and the refused -S."""

from __future__ import annotations

import pytest

from tensorcom.cli.common import Parser, add_shuffle_arguments, positionals_first


def parser() -> Parser:
    """URL (required) and NAME... around -f (a list option), -c N and -v."""
    p = Parser(prog="t")
    p.add_argument("url")
    p.add_argument("names", nargs="*")
    p.add_argument("-f", "--fields", nargs="+")
    p.add_argument("-c", "--count", type=int)
    p.add_argument("-v", action="store_true")
    return p


@pytest.mark.parametrize("argv", [
    ["U", "-f", "a", "b"],
    ["-f", "a", "b", "U"],
    ["-f", "a", "b", "U", "-c", "3"],
    ["-c", "3", "-f", "a", "b", "U"],
    ["-v", "--fields", "a", "b", "U"],
    ["--fie", "a", "b", "U"],
])
def test_list_option_gives_back_the_url(argv):
    args = parser().parse_args(argv)
    assert args.url == "U" and args.fields == ["a", "b"]


def test_positionals_between_options():
    args = parser().parse_args(["U", "-c", "3", "n1", "-v", "n2"])
    assert (args.url, args.names, args.count, args.v) == ("U", ["n1", "n2"], 3, True)


@pytest.mark.parametrize("argv", [["U", "-f", "a"], ["--fields=a", "U"], ["-c", "-3", "U", "-f", "a"], ["--", "U"]])
def test_unchanged_when_nothing_was_swallowed(argv):
    assert positionals_first(parser(), argv) == argv


def test_a_list_option_keeps_one_value(capsys):
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["-f", "U"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "url" in err


@pytest.mark.parametrize("default", [True, False])
def test_shuffle_flags_and_refused_dash_s(default, capsys):
    p = Parser(prog="t")
    add_shuffle_arguments(p, default=default, what="things")
    assert p.parse_args([]).shuffle is default
    assert p.parse_args(["--shuffle"]).shuffle is True and p.parse_args(["--no-shuffle"]).shuffle is False
    assert "S" not in vars(p.parse_args([]))
    with pytest.raises(SystemExit) as exit_:
        p.parse_args(["-S"])
    assert exit_.value.code == 2
    assert "--no-shuffle" in capsys.readouterr().err
