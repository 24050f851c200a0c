"""Issue 16's fault matrix: every fault x every scheme, with sample ids, kernel-made faults between network
namespaces (cells.py runs a cell; netns.py makes the faults).

| fault | lossless: zshare, zsplit (2 consumers), zpush/zpull | zpub/zsub |
|---|---|---|
| reset once, mid-stream | every id once, in order (split: the union); no exception | gaps counted exactly |
| partition 3 s | same | same |
| partition 3 x liveness | PeerLost naming the peer within liveness + 2 s; healed, it goes on: every id once | PeerLost in time; counted |
| 1% loss, 50 +- 20 ms, 200 Mbit/s | every id once; batches/s noted | counted |
| half-open server | PeerLost within liveness + 2 s; what came is in order, once | same, increasing |
| SIGSTOP 3 x liveness server / consumer | every id once (PeerLost or Detached allowed meanwhile) | counted |
| SIGKILL server, restart | PeerLost; then the new server's ids once, in order | PeerLost; counted |
| SIGKILL one consumer, restart | share: the new one gets an in-order run to the end; split: union once; push: no id twice | counted |

Push also runs reversed (rpush: zrpush binds, zrpull connects) in the cells where which side connects
matters, and over ipc (push-ipc) in the process faults only; the rest are skipped with the reason.

The cells of the selected tests all start together (each in its own namespaces, a few at a time) when
the first of them runs (on pytest-xdist workers: per group, the publisher's cells on one worker, the
lossless ones on another), so the matrix takes about as long as its slowest cells; each test then waits
for its own cell and checks it. Cells that fail because of the transport today are xfail(strict).
"""

from __future__ import annotations

import concurrent.futures
from collections import Counter

import pytest

from faults import cells
from faults.cells import BATCH, BATCHES, FAULTS, RESTART_FIRST, SCHEMES, Run

pytestmark = [pytest.mark.net, pytest.mark.procs, pytest.mark.timeout(600)]

CONCURRENT = {"fault-matrix-pub": 12, "fault-matrix-lossless": 8}  # cells at once, per group: the
# publisher's are paced and light (all at once); a lossless cell has 2-4 busy Python processes
SLACK = 2.0  # seconds beyond the liveness + 2 s: a generous margin for a loaded CI machine
KNOWN: dict[tuple[str, str], str] = {}  # (fault, scheme) -> what fails today (issue 16); remove when fixed
SOMETIMES: dict[tuple[str, str], str] = {}  # cells that fail in some runs only: xfail, not strict
PUSHES = ("zpush", "zrpush")  # the push family: every id once, a resend may come after later batches


def expected(first: int = 0) -> list[int]:
    return list(range(first, first + BATCHES * BATCH))


# --- running the selected cells side by side ---------------------------------------------------------


def group_of(scheme: str) -> str:
    """The pytest-xdist group of a scheme's cells: each group runs on one worker, its cells side by side;
    the publisher's cells (paced, long, light) beside the lossless ones (short, busy)."""
    return "fault-matrix-pub" if scheme == "pub" else "fault-matrix-lossless"


class Matrix:
    """Runs cells in a thread pool per group; `result(fault, scheme)` waits for one. `grouped` (on a pytest-xdist
    worker, which runs whole groups): the first result asked of a group submits every selected cell of
    that group; else every selected cell is submitted at once."""

    def __init__(self, selected: list[tuple[str, str]], grouped: bool):
        self.pools = {group: concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix=group)
                      for group, n in CONCURRENT.items()}
        self.selected, self.futures = selected, {}
        if not grouped:
            self.submit(selected)

    def submit(self, chosen: list[tuple[str, str]]) -> None:
        for cell in sorted(chosen, key=lambda cell: -FAULTS[cell[0]].length):
            if cell not in self.futures:
                pool = self.pools[group_of(cell[1])]
                self.futures[cell] = pool.submit(cells.run_cell, FAULTS[cell[0]], SCHEMES[cell[1]])

    def result(self, fault: str, scheme: str) -> Run:
        if (fault, scheme) not in self.futures:  # its group's first test here (or not collected up front)
            self.submit([c for c in self.selected if group_of(c[1]) == group_of(scheme)] + [(fault, scheme)])
        return self.futures[fault, scheme].result(timeout=550)

    def close(self) -> None:
        for pool in self.pools.values():
            pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def matrix(request, netns_available):
    selected = [(item.callspec.params["fault"], item.callspec.params["scheme"]) for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec") and not item.get_closest_marker("skip")]
    started = Matrix(selected, grouped=hasattr(request.config, "workerinput"))
    yield started
    started.close()


# --- what a consumer received -------------------------------------------------------------------------


def describe(ids: list[int], want: list[int]) -> str:
    """What is wrong with `ids` against `want`: missing, duplicated, foreign, first out of order."""
    counts, wanted = Counter(ids), set(want)
    dups = sum(n - 1 for n in counts.values() if n > 1)
    missing = len(wanted - counts.keys())
    foreign = len(counts.keys() - wanted)
    order = next((i for i in range(1, len(ids)) if ids[i] <= ids[i - 1]), None)
    return (f"{len(ids)} ids for {len(want)}: {missing} missing, {dups} duplicated, {foreign} unexpected"
            + (f", out of order at position {order} ({ids[order - 1]} then {ids[order]})" if order else ""))


def assert_once_in_order(ids: list[int], want: list[int]) -> None:
    assert ids == want, describe(ids, want)


def assert_union_once(lists: list[list[int]], want: list[int]) -> None:
    union = sorted(i for ids in lists for i in ids)
    assert union == want, "union of the consumers: " + describe(union, want)


def assert_prefix(ids: list[int], want: list[int]) -> None:
    """What came before a fault that ended the stream: the first len(ids) ids, in order, once."""
    assert ids == want[: len(ids)], describe(ids, want[: len(ids)])


def assert_counted(run: Run, proc) -> None:
    """zsub: ids increasing, and the last `stats.dropped` it printed equals the batches missing between
    the first batch it got of each server and that server's last batch (its last received one when
    the pass did not end with the marker, whose sequence number would have told)."""
    ids = run.ids(proc)
    assert ids == sorted(set(ids)), describe(ids, sorted(set(ids)))
    missing = 0
    for first in (0, RESTART_FIRST):
        events = [e.data for e in proc.events if "ids" in e.data and first <= e.data["ids"][0] < first + 10**6]
        if not events:
            continue
        ended = any(e.data.get("end") == events[-1]["pass"] for e in proc.events)
        got = [(e["ids"][0] - first) // BATCH for e in events]
        last = BATCHES - 1 if ended else got[-1]
        missing += last - got[0] + 1 - len(got)
    reported = [e.data["dropped"] for e in proc.events if "dropped" in e.data][-1]
    assert reported == missing, f"stats.dropped is {reported}, but {missing} batches are missing"


def assert_no_exception(run: Run) -> None:
    for proc in run.consumers:
        errors = [e.data for e in run.errors_of(proc)]
        assert not errors, f"{proc.name}: {errors[0]['error']}: {errors[0]['text']}"


def assert_peer_lost(run: Run, proc, since: float, within: float | None) -> None:
    """The first exception `proc` raised after `since` is PeerLost naming the server (address or sender
    id), `within` seconds after `since` when given."""
    error = next(e for e in run.errors_of(proc) if e.at >= since)
    data = error.data
    assert data["error"] == "PeerLost", f"{proc.name}: {data['error']}: {data['text']}"
    sender = run.notes["sender"] or "?"
    named = run.notes["server"] in data["text"] or sender in data["senders"] or sender in data["text"]
    assert named, f"{proc.name}: PeerLost names neither {run.notes['server']} nor the sender: {data}"
    if within is not None:
        assert error.at - since <= within + SLACK, f"{proc.name}: PeerLost {error.at - since:.1f} s after the fault"


# --- what each fault guarantees -------------------------------------------------------------------------


def assert_everything_once(run: Run) -> None:
    """Lossless: each consumer every id once, in order for share (split: the union; push: once, a
    batch resent after a dropped connection may come after later ones, as the issue's table allows);
    zsub: each one's gaps counted."""
    if not run.scheme.lossless:
        for proc in run.live_consumers():
            assert_counted(run, proc)
    elif run.scheme.name == "split":
        assert_union_once([run.ids(p) for p in run.consumers], expected())
    elif run.scheme.server in PUSHES:
        for proc in run.consumers:
            assert_union_once([run.ids(proc)], expected())
    else:
        for proc in run.consumers:
            assert_once_in_order(run.ids(proc), expected())


def check_absorbed(run: Run) -> None:
    """A reset, a short partition, a lossy slow link: no exception, nothing lost or repeated."""
    assert run.notes.get("aborted", 1) >= 1, "ss -K found no connection to reset"
    assert_no_exception(run)
    assert_everything_once(run)


def check_long_partition(run: Run) -> None:
    for proc in run.consumers:
        assert_peer_lost(run, proc, run.marks["fault"], run.liveness + 2)
    if run.scheme.lossless:
        assert_everything_once(run)
    else:
        assert run.ids(run.consumers[0], since=run.marks["healed"]), "nothing received after healing"
        assert_counted(run, run.consumers[0])


def check_half_open(run: Run) -> None:
    for proc in run.consumers:
        assert_peer_lost(run, proc, run.marks["fault"], run.liveness + 2)
    lists = [run.ids(p) for p in run.consumers]
    if run.scheme.name == "split":
        assert_union_once(lists, sorted(i for ids in lists for i in set(ids)))
    for ids in lists:
        assert ids == sorted(set(ids)), describe(ids, sorted(set(ids)))
        if run.scheme.name == "share" or run.scheme.server in PUSHES:
            assert_prefix(ids, expected())


def check_paused(run: Run) -> None:
    """Nothing lost: PeerLost (the window passed) or Detached are allowed on the way, not loss."""
    for proc in run.consumers:
        errors = {e.data["error"] for e in run.errors_of(proc)}
        assert errors <= {"PeerLost", "Detached"}, f"{proc.name}: {errors}"
    assert_everything_once(run)


def check_server_restarted(run: Run) -> None:
    old, new = expected(), expected(RESTART_FIRST)
    for proc in run.consumers:
        assert_peer_lost(run, proc, run.marks["fault"], None)
    before = [[i for i in run.ids(p) if i < RESTART_FIRST] for p in run.consumers]
    after = [[i for i in run.ids(p) if i >= RESTART_FIRST] for p in run.consumers]
    if not run.scheme.lossless:
        return assert_counted(run, run.consumers[0])
    if run.scheme.name == "split":
        assert_union_once(before, sorted(i for ids in before for i in ids))
        return assert_union_once(after, new)
    assert_prefix(before[0], old)
    assert_once_in_order(after[0], new)


def check_consumer_restarted(run: Run) -> None:
    killed, *others = run.consumers
    fresh = run.consumers[-1]
    if not run.scheme.lossless:
        return assert_counted(run, fresh)
    server = run.servers[0].events[-1].data
    if run.scheme.name == "split":
        assert_union_once([run.ids(p) for p in run.consumers], expected())
    elif run.scheme.name == "share":
        assert_prefix(run.ids(killed), expected())
        ids = run.ids(fresh)
        assert ids and ids == expected()[expected().index(ids[0]):], describe(ids, expected())
    else:
        ids = run.ids(killed) + run.ids(fresh)  # what the killed one had queued is resent once it is
        # detached (the liveness window), after later batches: no id twice, not in order
        assert len(ids) == len(set(ids)) and max(ids) == expected()[-1], describe(ids, expected())
    assert server.get("closed") or server.get("error") == "Undelivered", f"server: {server}"


CHECKS = {"reset": check_absorbed, "partition-3s": check_absorbed, "lossy": check_absorbed,
          "partition-long": check_long_partition, "half-open": check_half_open, "stop-server": check_paused,
          "stop-consumer": check_paused, "kill-server": check_server_restarted,
          "kill-consumer": check_consumer_restarted, "partition-30s": check_long_partition,
          "stop-server-30s": check_paused, "stop-consumer-30s": check_paused}


def cell(fault: str, scheme: str):
    """The parameters of one cell: xfail(strict) when KNOWN says it fails today, xfail when SOMETIMES says
    it fails in some runs, slow for the cells with the issue's full lengths."""
    known, sometimes = KNOWN.get((fault, scheme)), SOMETIMES.get((fault, scheme))
    marks = [pytest.mark.xfail(strict=True, reason=f"issue 16: {known}")] if known else []
    if SCHEMES[scheme].skips(fault):
        marks.append(pytest.mark.skip(reason=SCHEMES[scheme].skips(fault)))
    if sometimes:
        marks.append(pytest.mark.xfail(strict=False, reason=f"issue 16: {sometimes}"))
    if FAULTS[fault].slow:
        marks.append(pytest.mark.slow)
    marks.append(pytest.mark.xdist_group(group_of(scheme)))
    return pytest.param(fault, scheme, marks=marks, id=f"{fault}-{scheme}")


@pytest.mark.parametrize("fault,scheme", [cell(f, s) for f in FAULTS for s in SCHEMES])
def test_cell(matrix, fault, scheme, request):
    run = matrix.result(fault, scheme)
    request.node.user_properties.extend(run.notes.items())  # batches/s, connections reset, ...
    CHECKS[fault](run)
