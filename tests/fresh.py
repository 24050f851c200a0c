"""What an import loads, seen from a fresh interpreter (the test process has imported everything already).

    loaded_by(statements, modules)   the names of `modules` in sys.modules after running `statements`
                                     in a new `python -c` (its stderr in the AssertionError if it fails)
"""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_by(statements: str, modules: tuple[str, ...] | list[str]) -> list[str]:
    """Run `statements` (Python source, e.g. "import tensorcom") in a fresh interpreter; the sorted names of
    `modules` that it left in sys.modules."""
    code = f"import json, sys\n{statements}\nprint(json.dumps(sorted(m for m in {list(modules)!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
