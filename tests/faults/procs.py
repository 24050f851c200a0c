"""A process started by a fault test, read as a stream of JSON-line events.

    proc = Proc(["ip", "netns", "exec", ns, python, "peers.py", ...], name="consumer")
    proc.wait_for(lambda events: ids_received(events) >= 50, timeout=30, what="50 ids")
    proc.signal(signal.SIGSTOP); proc.kill()

Every line the process prints to stdout becomes an `Event` (its parsed JSON object, or {"line": text}
when it is not JSON) stamped with the test's monotonic clock when it was read, so a test measures
"how long after the fault" from its own clock. stderr goes to a temporary file whose tail is shown
when a wait fails. The process runs in a session of its own; `kill()` kills that whole session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Event:
    """One stdout line: `data` (the JSON object) and `at` (time.monotonic() when it was read)."""

    data: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


class Proc:
    """A subprocess whose stdout lines are collected as events by a reader thread (see module doc)."""

    def __init__(self, argv: list[str], name: str, env: dict[str, str] | None = None):
        self.name, self.argv = name, argv
        self.events: list[Event] = []
        self._changed = threading.Condition()
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._stderr_text = ""
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL,
                                      text=True, start_new_session=True, env=env)
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _read(self) -> None:
        for line in self.popen.stdout:
            try:
                data = json.loads(line)
            except ValueError:
                data = {"line": line.rstrip("\n")}
            with self._changed:
                self.events.append(Event(data if isinstance(data, dict) else {"value": data}))
                self._changed.notify_all()
        self.popen.wait()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, test: Callable[[list[Event]], Any], timeout: float, what: str) -> Any:
        """Wait until `test(events)` is truthy and return its value. Raises AssertionError naming `what`,
        the last events and stderr when `timeout` seconds pass or the process ends first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                value = test(list(self.events))
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0 or (self.popen.poll() is not None and not self._reader.is_alive()):
                    break
                self._changed.wait(min(left, 0.5))
        state = "ended" if self.popen.poll() is not None else f"still running after {timeout:.0f} s"
        raise AssertionError(f"{self.name}: no {what} ({state}); {self.describe()}")

    def wait_exit(self, timeout: float) -> int:
        """The exit status, waiting at most `timeout` s (AssertionError if it is still running)."""
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name}: still running after {timeout:.0f} s; {self.describe()}") from None
        self._reader.join(timeout=5)
        return code

    def describe(self, last: int = 6) -> str:
        """The last events and the tail of stderr, for failure messages."""
        tail = [e.data for e in self.events[-last:]]
        err = self.stderr()[-1500:].strip()
        return f"exit status {self.popen.poll()}; last events {tail}" + (f"; stderr: {err}" if err else "")

    def stderr(self) -> str:
        """What the process wrote to stderr so far (all of it, also after close())."""
        if not self._stderr.closed:
            self._stderr.seek(0)
            self._stderr_text = self._stderr.read()
        return self._stderr_text

    def signal(self, sig: int) -> None:
        """Send `sig` (SIGSTOP, SIGCONT, SIGKILL, ...) to the process itself."""
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def kill(self) -> None:
        """SIGKILL the process's whole session (itself and anything it started) and reap it."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._reader.join(timeout=5)

    def close(self) -> None:
        """kill(), then release the pipes and the stderr file."""
        self.kill()
        self.stderr()
        self.popen.stdout.close()
        self._stderr.close()
