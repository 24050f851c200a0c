"""What the test peer scripts of this folder (share_peer.py, stream_peer.py) share: their command line
`ROLE URL [--option VALUE ...]` and their JSON-line reports.

    run({"serve": serve, "receive": receive}, batches=10, every=0.0, out=None)   # in the script's main
    say(ready=conn.addresses)                                                    # one JSON line, flushed
    fail(exc, undelivered=n)                                                     # {"error", "text", ...}, exit 3
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable


def say(**fields: Any) -> None:
    """Print `fields` as one JSON line, flushed (the test reads it while the peer runs)."""
    print(json.dumps(fields), flush=True)


def fail(exc: BaseException, **fields: Any) -> None:
    """Report `exc` as {"error": its class name, "text": ..., **fields} and exit with status 3."""
    say(error=type(exc).__name__, text=str(exc), **fields)
    sys.exit(3)


def run(roles: dict[str, Callable[[argparse.Namespace], None]], **options: Any) -> None:
    """Parse `ROLE URL` and `--name VALUE` for each of `options` (name -> default; the default's type
    converts the value, str for a None default), then run roles[ROLE](args)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=list(roles))
    parser.add_argument("url")
    for name, default in options.items():
        parser.add_argument("--" + name.replace("_", "-"), type=str if default is None else type(default),
                            default=default)
    args = parser.parse_args()
    roles[args.role](args)
