"""Option names checked where a reader or a pipeline is built, with a "did you mean" for typos.

    check_options("ShardDataset", given, known)     TypeError naming an unknown option and its near miss
    near_misses(given, known)                        the given names that look like a misspelled known one
    renamed_option(value, old_value, new, old, where)   a deprecated spelling, taken with a warning

Used by the message codec (wire), the shards layer (samples, ShardDataset) and the pipeline layer
(Pipeline methods, sources, serving).
"""

from __future__ import annotations

import difflib
import warnings
from typing import Any, Iterable


def _suggestion(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_options(where: str, given: Iterable[str], known: Iterable[str]) -> None:
    """Raise TypeError for the first name of `given` not in `known`, suggesting the closest known name."""
    known = set(known)
    for name in given:
        if name not in known:
            raise TypeError(f"{where} got an unknown option {name!r}{_suggestion(name, known)} "
                            f"(options: {', '.join(sorted(known))})")


def near_misses(where: str, given: Iterable[str], known: Iterable[str]) -> None:
    """Raise TypeError for a name of `given` that is not in `known` but close to one of them: for
    options passed on to another layer (open options), where unknown names may still be valid."""
    known = set(known)
    for name in given:
        if name not in known and _suggestion(name, known):
            raise TypeError(f"{where} got an unknown option {name!r}{_suggestion(name, known)}")


def renamed_option(value: Any, old_value: Any, new: str, old: str, where: str) -> Any:
    """The value of option `new`, taking its deprecated spelling `old` (with a DeprecationWarning) when
    only that one was given (None means not given); TypeError when both are."""
    if old_value is None:
        return value
    if value is not None:
        raise TypeError(f"{where}: give {new}= only ({old}= is its deprecated spelling), not both")
    warnings.warn(f"{where}: {old}= is deprecated, use {new}=", DeprecationWarning, stacklevel=3)
    return old_value
