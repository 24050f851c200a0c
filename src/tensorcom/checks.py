"""Argument checks, one rule each, with the same words everywhere; "did you mean" for typos.

    positive("workers", value)                 the int when >= 1, else ValueError naming it
    non_negative("skip", value)                the int when >= 0, else ValueError naming it
    did_you_mean(word, choices)                "; did you mean 'x'?" for the closest choice, or ""
    choice("mode", value, ("share", "split"))  `value` when it is one of them, else ValueError + did you mean
    check_options(where, given, known)         TypeError naming an unknown option and its near miss
    near_misses(where, given, known)           TypeError for a given name that looks like a misspelled known one
    renamed_option(value, old_value, new, old, where)   a deprecated spelling, taken with a warning

Pure (standard library only); every layer uses it: the codec, shards, pipeline, transport and the
command-line tools (whose argparse types are thin wrappers around these rules).
"""

from __future__ import annotations

import difflib
import warnings
from typing import Any, Iterable

_CLOSE = 0.6  # difflib's similarity above which a known word is offered as "did you mean"
_OPTION_CLOSE = 0.75  # stricter for option names: near_misses refuses a name this close to a known one


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive(name: str, value: Any) -> int:
    """`value` when it is an int >= 1 (a count: workers, batch size, credit...), else ValueError naming `name`."""
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


def non_negative(name: str, value: Any) -> int:
    """`value` when it is an int >= 0, else ValueError naming `name`."""
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


def did_you_mean(word: Any, choices: Iterable[Any], cutoff: float = _CLOSE) -> str:
    """`; did you mean 'X'?` for the choice closest to `word` (difflib, similarity >= `cutoff`), or ""
    when none is that close."""
    close = difflib.get_close_matches(str(word), sorted(str(c) for c in choices), n=1, cutoff=cutoff)
    return f"; did you mean {close[0]!r}?" if close else ""


def choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """`value` when it is one of `choices`, else ValueError naming `name`, the choices and the closest one."""
    choices = list(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}"
                         f"{did_you_mean(value, choices)}")
    return value


def check_options(where: str, given: Iterable[str], known: Iterable[str]) -> None:
    """Raise TypeError for the first name of `given` not in `known`, suggesting the closest known name."""
    known = set(known)
    for name in given:
        if name not in known:
            raise TypeError(f"{where} got an unknown option {name!r}{did_you_mean(name, known, _OPTION_CLOSE)} "
                            f"(options: {', '.join(sorted(known))})")


def near_misses(where: str, given: Iterable[str], known: Iterable[str]) -> None:
    """Raise TypeError for a name of `given` that is not in `known` but close to one of them: for
    options passed on to another layer (open options), where unknown names may still be valid."""
    known = set(known)
    for name in given:
        hint = did_you_mean(name, known, _OPTION_CLOSE) if name not in known else ""
        if hint:
            raise TypeError(f"{where} got an unknown option {name!r}{hint}")


def renamed_option(value: Any, old_value: Any, new: str, old: str, where: str) -> Any:
    """The value of option `new`, taking its deprecated spelling `old` (with a DeprecationWarning) when
    only that one was given (None means not given); TypeError when both are."""
    if old_value is None:
        return value
    if value is not None:
        raise TypeError(f"{where}: give {new}= only ({old}= is its deprecated spelling), not both")
    warnings.warn(f"{where}: {old}= is deprecated, use {new}=", DeprecationWarning, stacklevel=3)
    return old_value
