"""Connections dropped without close(): they release their sockets in a safe order and warn, and no
pattern of dropping (with peers, batches in flight, reference cycles, collections or none, forks)
stops the process's other Connections. Each case runs `dropping.py` in a subprocess with a timeout
(a frozen ZeroMQ I/O thread must fail the test, not hang it) and reads the facts it prints."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.net

SCRIPT = os.path.join(os.path.dirname(__file__), "dropping.py")
SCHEMES = ["zpush", "zpull", "zrpush", "zrpull", "zpub", "zsub", "zrpub", "zrsub", "zshare", "zsplit", "zjoin"]
DROPPED_PER_SCHEME = 50 + 17  # 50 of the scheme, and the peers of the 17 dropped with traffic


def run_dropping(*args: str, timeout: float = 100) -> tuple[str, dict]:
    """(output, facts): what `python dropping.py ARGS` printed, and its `key value` lines as a dict
    (the last value of each key; "delivered" lines keyed by their scheme)."""
    try:
        done = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout)
        out = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        out = f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {timeout} s"
    facts = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if key == "delivered":
            key, _, value = value.partition(" ")
            key = f"delivered {key}"
        facts[key] = value
    return out, facts


@pytest.mark.timeout(180)  # above the script's own 150 s, so that a hang shows the script's output
@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_fifty_dropped_connections_of_every_scheme_then_pairs_still_deliver(transport, ipc_path):
    folder = os.path.dirname(ipc_path())  # the fixture's folder, emptied at teardown
    out, facts = run_dropping("many", transport, folder, *SCHEMES, timeout=150)
    assert "done" in facts, out
    for scheme in SCHEMES:
        assert facts.get(f"delivered {scheme}", "").startswith("True "), out
    assert int(facts["unclosed_connections"]) == DROPPED_PER_SCHEME * len(SCHEMES), out
    assert facts["unclosed_sockets"] == "0", out  # every socket closed by its Connection, none by pyzmq
    assert facts["context_released"] == "True", out  # every user of the shared context released it


def test_three_unclosed_receivers_in_turn_all_receive():
    """tensorcom 0.1's README style: a function makes `Connection(url)`, receives one batch, never
    closes it (and a cycle keeps it uncollected); the third call used to receive nothing, ever."""
    out, facts = run_dropping("symptom")
    assert "done" in facts, out
    assert "error" not in facts, out
    received = [line for line in out.splitlines() if line.startswith("call ")]
    assert [line.split()[1] for line in received] == ["0", "1", "2"], out
    assert facts["context_released"] == "True", out


def test_a_dropped_connection_warns_and_a_closed_one_does_not():
    out, facts = run_dropping("warns")
    assert "done" in facts, out
    assert facts["unclosed_connections"] == "1", out
    assert facts["unclosed_sockets"] == "0", out
    assert facts["context_released"] == "True", out


def test_a_forked_child_dropping_its_copies_leaves_the_parents_connections_working():
    out, facts = run_dropping("fork")
    assert "done" in facts, out
    assert facts["child_exit"] == "0", out
    assert (facts["before"], facts["after"]) == ("1", "2"), out
    assert facts["unclosed_connections"] == "0", out

