"""The cells of issue 16's fault matrix: one scheme, one fault, the processes of one run.

    run = run_cell(FAULTS["partition-3s"], SCHEMES["share"])   # namespaces made and removed inside
    run.ids(consumer), run.errors(consumer), run.marks["fault"], run.servers[-1].events

A run puts the server in namespace "server" and its consumers in "client", joined by one veth pair
(or, for the lossy cell, "server" - "mid" - "client" with the delaying relay in "mid"). The server
(peers.py) sends BATCHES batches of BATCH sample ids; once the consumers have received FAULT_AT
batches between them the fault is injected (that event, not a sleep, is the synchronisation); then
the run waits until every consumer still alive has ended or given up (see `finish`). Processes are
killed and the namespaces removed whatever happens; an AssertionError says what did not come.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Callable

from faults.netns import Net
from faults.procs import Event, Proc

LIVENESS = 10.0       # the default: a reset or a 3 s partition must not end a pass
SHORT_LIVENESS = 4.0  # cells whose fault outlasts liveness use this, and a fault LONG = 3 x as long
LONG = 3 * SHORT_LIVENESS  # the 30 s against a 10 s window, scaled down for CI
PORT = 7880
BATCHES, BATCH = 300, 4
FAULT_AT = 50  # batches received, all consumers together, before the fault
RESTART_FIRST = 1_000_000  # the first id of a restarted server (its ids differ from the first one's)
WAIT = 60.0  # seconds any one expected event may take


@dataclass(frozen=True)
class Scheme:
    """A server/consumer URL pair of the matrix: `server_binds` says which side binds (zpush: the consumer);
    `transport` "ipc": a Unix socket at a path (the namespaces share the filesystem); `only`: the faults
    it runs (None: all), the others skipped for `why_not`."""

    name: str
    server: str
    consumer: str
    consumers: int = 1
    lossless: bool = True
    server_binds: bool = True
    every: float = 0.01  # seconds between batches: the lossless servers are paced by their consumers
    transport: str = "tcp"
    only: tuple[str, ...] | None = None
    why_not: str = ""

    def skips(self, fault: str) -> str | None:
        """Why this scheme does not run `fault` (None: it does)."""
        return None if self.only is None or fault in self.only else self.why_not


SCHEMES = {
    "share": Scheme("share", "zshare", "zjoin"),
    "split": Scheme("split", "zsplit", "zjoin", consumers=2),
    "push": Scheme("push", "zpush", "zpull", server_binds=False),
    # a publisher never waits: slow enough that its stream outlasts the longest fault (30 s) with
    # room to spare after healing (~48 s in all)
    "pub": Scheme("pub", "zpub", "zsub", lossless=False, every=0.16),
    # the reversed push: the server binds, the consumer connects (and reconnects after a fault); the
    # faults whose outcome does not depend on which side connects are push's
    "rpush": Scheme("rpush", "zrpush", "zrpull", only=("reset", "partition-3s", "partition-long", "kill-server",
                                                       "kill-consumer"),
                    why_not="the same sessions as push whichever side connects: push's cell covers it"),
    # push over a Unix socket (data and acknowledgement links): only process faults exist there
    "push-ipc": Scheme("push-ipc", "zpush", "zpull", server_binds=False, transport="ipc",
                       only=("stop-server", "stop-consumer", "kill-server", "kill-consumer"),
                       why_not="ipc: no network between the peers (nothing to reset, partition, slow down "
                               "or make vanish)"),
}


@dataclass
class Run:
    """One cell's Net, scheme and processes (every server and consumer started, killed ones included),
    the instants of its fault in `marks` (time.monotonic()), and what the fault did in `notes`."""

    net: Net
    scheme: Scheme
    liveness: float
    errors: int
    length: float = LONG  # seconds of a long fault (partition, SIGSTOP)
    every: float = 0.0  # the fault's least seconds between a server's batches (0: the scheme's pace)
    servers: list[Proc] = field(default_factory=list)
    consumers: list[Proc] = field(default_factory=list)
    killed: set[Proc] = field(default_factory=set)
    marks: dict[str, float] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)

    def ipc_path(self) -> str:
        """The Unix socket path of an ipc scheme (unique per Net; removed by run_cell)."""
        return f"/tmp/{self.net.ns('server')}.ipc"

    def urls(self) -> tuple[str, str]:
        """(server URL, consumer URL): the binding side binds its own address; the connecting side goes to
        that address, or to the relay in "mid" (which forwards to it). ipc: both use one path."""
        relayed = "mid" in self.net.names
        s, c = self.scheme.server, self.scheme.consumer
        if self.scheme.transport == "ipc":
            return f"{s}+ipc://{self.ipc_path()}", f"{c}+ipc://{self.ipc_path()}"
        if self.scheme.server_binds:
            entry = self.net.addr("mid", "client") if relayed else self.net.addr("server")
            return f"{s}://{self.net.addr('server')}:{PORT}", f"{c}://{entry}:{PORT}"
        entry = self.net.addr("mid", "server") if relayed else self.net.addr("client")
        return f"{s}://{entry}:{PORT}", f"{c}://{self.net.addr('client')}:{PORT}"

    def start_server(self, first: int = 0) -> Proc:
        proc = self.net.python("server", "peers.py", "serve", self.urls()[0], "--batches", str(BATCHES),
                               "--batch", str(BATCH), "--first", str(first), "--liveness", str(self.liveness),
                               "--every", str(max(self.every, self.scheme.every)),
                               "--min-consumers", str(self.scheme.consumers), name=f"server{len(self.servers)}")
        self.servers.append(proc)
        return proc

    def start_consumer(self) -> Proc:
        proc = self.net.python("client", "peers.py", "consume", self.urls()[1], "--liveness", str(self.liveness),
                               "--errors", str(self.errors), name=f"consumer{len(self.consumers)}")
        self.consumers.append(proc)
        proc.wait_for(lambda ev: any("ready" in e.data for e in ev), timeout=WAIT, what="ready")
        return proc

    def ids(self, proc: Proc, since: float = 0.0) -> list[int]:
        """The ids `proc` received (in order), those read after `since` only when given."""
        return [i for e in proc.events if "ids" in e.data and e.at >= since for i in e.data["ids"]]

    def errors_of(self, proc: Proc) -> list[Event]:
        return [e for e in proc.events if "error" in e.data]

    def received(self) -> int:
        """Batches received by all consumers together."""
        return sum(1 for p in self.consumers for e in p.events if "ids" in e.data)

    def wait_received(self, batches: int = FAULT_AT) -> None:
        """Wait (on the first consumer's events) until the consumers together have `batches` batches."""
        self.consumers[0].wait_for(lambda ev: self.received() >= batches, timeout=WAIT, what=f"{batches} batches")

    def fault(self, name: str = "fault") -> float:
        """Mark the instant of a fault (now) under `name`; returns it."""
        self.marks[name] = time.monotonic()
        return self.marks[name]

    def wait_error(self, proc: Proc, since: float, timeout: float) -> Event:
        """The first error event `proc` printed after `since` (AssertionError when none within timeout)."""
        return proc.wait_for(lambda ev: [e for e in ev if "error" in e.data and e.at >= since], timeout=timeout,
                             what="exception after the fault")[0]

    def summary(self) -> str:
        """One line per process: its ids, exceptions, exit status and last events (for failure messages)."""
        lines = []
        for proc in self.servers + self.consumers:
            errors = [f"{e.data['error']}: {e.data['text'][:160]}" for e in self.errors_of(proc)]
            last = [e.data for e in proc.events[-3:] if "ids" not in e.data]
            lines.append(f"  {proc.name}: {len(self.ids(proc))} ids, exceptions {errors}, "
                         f"exit {proc.popen.poll()}, last events {last}")
        return "\n".join(lines)

    def live_consumers(self) -> list[Proc]:
        return [p for p in self.consumers if p not in self.killed]

    def kill(self, proc: Proc) -> None:
        proc.kill()
        self.killed.add(proc)

    def finish(self, timeout: float = WAIT) -> None:
        """Wait until every live consumer printed "done" and every live server exited (then it printed
        "closed" or an "error"); a zsub consumer whose server is gone may wait for ever, so lossy schemes
        stop waiting once the servers exited and the consumer's pass ended or failed after that."""
        for server in self.servers:
            if server not in self.killed:
                server.wait_exit(timeout)
        for proc in self.live_consumers():
            proc.wait_for(lambda ev: self._finished(ev), timeout=timeout, what="end of its passes")

    def _finished(self, events: list[Event]) -> bool:
        if any("done" in e.data for e in events):
            return True
        if self.scheme.lossless or not self.servers[-1].events:
            return False
        server_end = self.servers[-1].events[-1].at
        return any(("end" in e.data or "error" in e.data) and e.at >= server_end for e in events)


def start(run: Run) -> None:
    """The server and the scheme's consumers; notes the server's address and its sender id."""
    ipc = run.scheme.transport == "ipc"
    run.notes["server"] = run.ipc_path() if ipc else f"{run.net.addr('server')}:{PORT}"
    server = run.start_server()
    ready = server.wait_for(lambda ev: [e.data for e in ev if "ready" in e.data], timeout=WAIT, what="ready")
    run.notes["sender"] = ready[0].get("sender")
    for _ in range(run.scheme.consumers):
        run.start_consumer()


# --- the faults: each takes a started Run, injects its fault once FAULT_AT batches arrived, and finishes ---


def reset_once(run: Run) -> None:
    """Abort the server's TCP connections once (ss -K: an RST to each peer); ZeroMQ reconnects."""
    run.wait_received()
    run.fault()
    run.notes["aborted"] = run.net.reset_connections("server")
    run.finish()


def partition_short(run: Run) -> None:
    """Drop everything between server and consumers for 3 s (< liveness), then heal."""
    run.wait_received()
    run.fault()
    run.net.partition("server")
    time.sleep(3.0)  # the fault itself
    run.net.heal()
    run.finish()


def partition_long(run: Run) -> None:
    """A partition of run.length s (> liveness): every consumer raises within it; heal; they go on."""
    run.wait_received()
    since = run.fault()
    run.net.partition("server")
    for proc in run.consumers:
        error = run.wait_error(proc, since, timeout=run.length)
        run.notes[f"{proc.name} PeerLost after s"] = round(error.at - since, 1)
    time.sleep(max(0.0, since + run.length - time.monotonic()))  # the rest of the partition
    run.net.heal()
    run.fault("healed")
    run.finish()


def lossy(run: Run) -> None:
    """The whole stream through 1% loss, 50 +- 20 ms latency each way and a 200 Mbit/s cap (set up by
    `prepare_lossy` before the peers start); notes the consumers' batches per second."""
    run.finish(timeout=2 * WAIT)
    events = [e for p in run.consumers for e in p.events if "ids" in e.data]
    span = max(e.at for e in events) - min(e.at for e in events)
    run.notes["batches_per_s"] = round(len(events) / span, 1) if span > 0 else None


def prepare_lossy(run: Run) -> None:
    """1% loss and a 200 Mbit/s cap on both links, and the relay in "mid" towards the side that binds."""
    run.net.loss(1)
    run.net.rate(200)
    target = (run.net.addr("server"), PORT) if run.scheme.server_binds else (run.net.addr("client"), PORT)
    run.net.latency("mid", PORT, target, ms=50, jitter=20)


def half_open(run: Run) -> None:
    """The server's host vanishes (no FIN, no RST); every consumer must raise within the window."""
    run.wait_received()
    since = run.fault()
    run.net.vanish("server")
    run.killed.update(run.servers)
    for proc in run.consumers:
        error = run.wait_error(proc, since, timeout=WAIT)
        run.notes[f"{proc.name} PeerLost after s"] = round(error.at - since, 1)
    run.finish()


def stop_server(run: Run) -> None:
    """SIGSTOP the server for run.length s, then SIGCONT."""
    pause(run, run.servers[0])


def stop_consumer(run: Run) -> None:
    """SIGSTOP the first consumer for run.length s, then SIGCONT."""
    pause(run, run.consumers[0])


def pause(run: Run, proc: Proc) -> None:
    run.wait_received()
    run.fault()
    proc.signal(signal.SIGSTOP)
    time.sleep(run.length)  # the fault itself
    proc.signal(signal.SIGCONT)
    run.fault("resumed")
    run.finish()


def kill_server(run: Run) -> None:
    """SIGKILL the server; once every consumer raised, start a new one (ids from RESTART_FIRST)."""
    run.wait_received()
    since = run.fault()
    run.kill(run.servers[0])
    for proc in run.consumers:
        run.wait_error(proc, since, timeout=WAIT)
    run.fault("restarted")
    run.start_server(first=RESTART_FIRST)
    run.finish()


def kill_consumer(run: Run) -> None:
    """SIGKILL the first consumer, then start a new one in its place."""
    run.wait_received()
    run.fault()
    run.kill(run.consumers[0])
    run.start_consumer()
    run.finish()


@dataclass(frozen=True)
class Fault:
    """A row of the matrix: how to inject it, the liveness window its peers use, how many exceptions a
    consumer takes before giving up, how long a long fault lasts, what to set up before the peers start,
    whether it is `slow` (the issue's full 30 s against a 10 s window: not in the default run), and the least
    pause between its servers' batches (`every`; 0: the scheme's pace)."""

    name: str
    inject: Callable[[Run], None]
    liveness: float = LIVENESS
    errors: int = 1
    prepare: Callable[[Run], None] | None = None
    length: float = LONG
    slow: bool = False
    every: float = 0.0


FAULTS = {f.name: f for f in [
    Fault("reset", reset_once),
    Fault("partition-3s", partition_short),
    Fault("partition-long", partition_long, SHORT_LIVENESS, errors=5),
    Fault("lossy", lossy, prepare=prepare_lossy),
    Fault("half-open", half_open, SHORT_LIVENESS),
    Fault("stop-server", stop_server, SHORT_LIVENESS, errors=3),
    Fault("stop-consumer", stop_consumer, SHORT_LIVENESS, errors=3),
    Fault("kill-server", kill_server, SHORT_LIVENESS, errors=6),  # PeerLost each window until the new server is up
    # paced so that the stream (15 s) outlasts the start of the replacement on a loaded machine: a
    # replacement that comes after the last batch waits for a server that has gone
    Fault("kill-consumer", kill_consumer, SHORT_LIVENESS, errors=2, every=0.05),
    Fault("partition-30s", partition_long, LIVENESS, errors=5, length=30.0, slow=True),
    Fault("stop-server-30s", stop_server, LIVENESS, errors=3, length=30.0, slow=True),
    Fault("stop-consumer-30s", stop_consumer, LIVENESS, errors=3, length=30.0, slow=True),
]}


def run_cell(fault: Fault, scheme: Scheme) -> Run:
    """Run one cell in namespaces of its own; returns the Run (its processes dead, its Net closed)."""
    hosts = ["server", "mid", "client"] if fault.prepare else ["server", "client"]
    with Net(hosts) as net:
        run = Run(net, scheme, fault.liveness, fault.errors, fault.length, every=fault.every)
        if fault.prepare:
            fault.prepare(run)
        try:
            start(run)
            fault.inject(run)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{run.summary()}") from None
        finally:
            if scheme.transport == "ipc":
                for path in glob.glob(run.ipc_path() + "*"):  # the data socket and the acknowledgement sockets
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
    return run
