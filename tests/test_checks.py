"""tensorcom.checks: the one rule for counts and choices, and "did you mean", used by every layer."""

import argparse

import pytest

from tensorcom import checks
from tensorcom.cli.common import nonnegative_int, positive_int


@pytest.mark.parametrize("value", [0, -1, 1.0, "3", True, None])
def test_positive_refuses_what_is_not_an_int_of_at_least_one(value):
    with pytest.raises(ValueError, match=r"workers must be an int >= 1, got"):
        checks.positive("workers", value)


def test_positive_and_non_negative_return_the_value():
    assert checks.positive("n", 3) == 3
    assert checks.non_negative("n", 0) == 0
    with pytest.raises(ValueError, match="skip must be an int >= 0, got -1"):
        checks.non_negative("skip", -1)


def test_choice_names_the_closest_choice():
    assert checks.choice("mode", "split", ("share", "split")) == "split"
    with pytest.raises(ValueError, match=r"mode must be one of 'share', 'split', got 'shrae'; did you mean 'share'\?"):
        checks.choice("mode", "shrae", ("share", "split"))
    assert checks.did_you_mean("zzzz", ["share", "split"]) == ""


def test_the_command_line_types_apply_the_same_rule():
    assert positive_int("4") == 4 and nonnegative_int("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be an int >= 1, got 0 \('0'\)"):
        positive_int("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be an int >= 0"):
        nonnegative_int("-2")


def test_option_checks_suggest_only_close_names():
    with pytest.raises(TypeError, match="did you mean 'workers'"):
        checks.check_options("Pipeline.serve", ["wokers"], ["workers", "buffer"])
    checks.near_misses("open", ["timeout"], ["workers"])  # unrelated names pass on to the next layer
