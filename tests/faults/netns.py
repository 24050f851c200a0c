"""Network namespaces joined by veth pairs, and the kernel faults a test puts between them.

    with Net(["server", "client"]) as net:              # two namespaces, one veth pair between them
        server = net.run("server", [python, "peers.py", "serve", f"zshare://{net.addr('server')}:7880"])
        ...
        net.partition("server"); net.heal()             # nft drops on the link, both ways: no FIN, no RST
        net.reset_connections("server")                 # ss -K: both ends of each TCP connection see it end
        net.loss(1); net.rate(200)                      # nft numgen drops; tbf on both ends of each link
        net.latency("mid", 7880, ("10.250.0.1", 7880))  # a delaying relay (relay.py) in a middle namespace
        net.vanish("server")                            # drop all to and from it, then SIGKILL its processes

Every Net has namespaces of its own, named `tf<pid>-<n><host>` (so tests run side by side, and a later
run removes those of a process that died: `sweep()`). Link i of a Net joins hosts a and b over
10.250.i.0/30 (a is .1, b is .2); the device in a's namespace is `to-<b>`. The addresses exist only
inside these namespaces, so no traffic leaves them. Faults are nftables tables of the netdev family
whose ingress chains sit on both ends of a link (a dropped packet is lost on the wire: the sender's
kernel sent it), and tbf qdiscs; they go away with the namespaces. `close()` (the end of the `with`)
SIGKILLs every process started in the namespaces, then deletes them; it runs even when the test failed.
There is no netem in this kernel: latency is a userspace relay, loss is nftables, rate is tbf.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from faults.procs import Proc

HERE = Path(__file__).resolve().parent
PREFIX = "tf"
_count = itertools.count()


def sh(argv: list[str], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command of the harness (ip, nft, tc, ss); raise RuntimeError with its stderr if it fails."""
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


@cache
def unavailable() -> str | None:
    """Why the harness cannot run here (a pytest.skip reason), or None when it can."""
    if os.geteuid() != 0:
        return "network-namespace fault tests need root (CI runs them as root)"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("ss", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing: install {package} (./run setup does it as root)"
    name = f"{PREFIX}{os.getpid()}-probe"
    try:
        sh(["ip", "netns", "add", name])
    except RuntimeError as exc:
        return f"network namespaces are not permitted here: {exc}"
    try:
        sh(["ip", "netns", "exec", name, "nft", "add", "table", "netdev", "probe"])
    except RuntimeError as exc:
        return f"nftables cannot make netdev tables in a namespace: {exc}"
    finally:
        sh(["ip", "netns", "del", name], check=False)
    return None


def namespaces() -> list[str]:
    """The names of every network namespace of this machine (`ip netns list`)."""
    return [line.split()[0] for line in sh(["ip", "netns", "list"]).stdout.splitlines() if line.strip()]


def sweep() -> list[str]:
    """Delete the namespaces (and their processes) left by harness processes that no longer exist;
    returns their names."""
    stale = []
    for name in namespaces():
        pid = name[len(PREFIX):].split("-")[0]
        if name.startswith(PREFIX) and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            kill_all_in(name)
            sh(["ip", "netns", "del", name], check=False)
            stale.append(name)
    return stale


def kill_all_in(ns: str) -> None:
    """SIGKILL every process inside namespace `ns`."""
    for pid in sh(["ip", "netns", "pids", ns], check=False).stdout.split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass


@dataclass(frozen=True)
class Link:
    """A veth pair between hosts `a` and `b` (addresses `addr_a`, `addr_b`; devices `to-b` in a's
    namespace and `to-a` in b's)."""

    a: str
    b: str
    index: int

    @property
    def addr_a(self) -> str:
        return f"10.250.{self.index}.1"

    @property
    def addr_b(self) -> str:
        return f"10.250.{self.index}.2"

    def ends(self) -> list[tuple[str, str]]:
        """(host, device) of both ends."""
        return [(self.a, f"to-{self.b}"), (self.b, f"to-{self.a}")]


class Net:
    """Namespaces for `hosts`, joined by `links` (pairs of hosts; default: a chain in the given
    order), with the fault controls of the module doc. A context manager; close() undoes everything."""

    def __init__(self, hosts: list[str], links: list[tuple[str, str]] | None = None):
        if len(set(hosts)) != len(hosts) or any(len(h) > 10 for h in hosts):
            raise ValueError(f"hosts must be distinct names of at most 10 characters: {hosts!r}")
        pairs = links if links is not None else list(zip(hosts, hosts[1:]))
        self.hosts = list(hosts)
        self.links = [Link(a, b, i) for i, (a, b) in enumerate(pairs)]
        self.procs: list[Proc] = []
        self.names: dict[str, str] = {}
        self._serial = next(_count)

    def __enter__(self) -> "Net":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Make the namespaces (loopback up) and the links (addresses, up)."""
        for host in self.hosts:
            name = f"{PREFIX}{os.getpid()}-{self._serial}{host}"
            sh(["ip", "netns", "add", name])
            self.names[host] = name
            sh(["ip", "-n", name, "link", "set", "lo", "up"])
        for link in self.links:
            (a, dev_a), (b, dev_b) = link.ends()
            sh(["ip", "link", "add", "name", dev_a, "netns", self.ns(a), "type", "veth",
                "peer", "name", dev_b, "netns", self.ns(b)])
            for host, dev, addr in ((a, dev_a, link.addr_a), (b, dev_b, link.addr_b)):
                sh(["ip", "-n", self.ns(host), "addr", "add", f"{addr}/30", "dev", dev])
                sh(["ip", "-n", self.ns(host), "link", "set", dev, "up"])

    def close(self) -> None:
        """SIGKILL every process started here and everything left inside the namespaces, then delete them."""
        for proc in self.procs:
            proc.close()
        for name in self.names.values():
            kill_all_in(name)
            sh(["ip", "netns", "del", name], check=False)
        self.names.clear()

    def ns(self, host: str) -> str:
        """The namespace name of `host`."""
        return self.names[host]

    def link(self, a: str, b: str) -> Link:
        """The link between hosts a and b (either order)."""
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        raise ValueError(f"no link between {a!r} and {b!r}")

    def links_of(self, a: str | None, b: str | None = None) -> list[Link]:
        """The link a-b, every link of host a (b None), or every link (both None)."""
        if b is not None:
            return [self.link(a, b)]
        return [link for link in self.links if a is None or a in (link.a, link.b)]

    def addr(self, host: str, peer: str | None = None) -> str:
        """`host`'s address on its link to `peer` (default: its first link)."""
        link = self.links_of(host, peer)[0]
        return link.addr_a if link.a == host else link.addr_b

    def run(self, host: str, argv: list[str], name: str | None = None) -> Proc:
        """Start `argv` inside `host`'s namespace; the Proc is killed at close()."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = Proc(["ip", "netns", "exec", self.ns(host), *argv], name=name or f"{host}:{Path(argv[0]).name}",
                    env=env)
        proc.host = host
        self.procs.append(proc)
        return proc

    def python(self, host: str, script: str, *args: str, name: str | None = None) -> Proc:
        """Start this interpreter on `script` (a file of this folder, or a path) with `args` in `host`."""
        return self.run(host, [sys.executable, str(HERE / script), *args], name=name)

    # --- faults -------------------------------------------------------------------------------------

    def _drop_table(self, table: str, links: list[Link], rule: str) -> None:
        """Add netdev table `table` with `rule` in the ingress chain of both ends of each of `links`."""
        for link in links:
            for host, dev in link.ends():
                chain = "in_" + dev.replace("-", "_")
                script = (f"table netdev {table} {{\n chain {chain} {{\n"
                          f"  type filter hook ingress device \"{dev}\" priority 0; policy accept;\n"
                          f"  {rule}\n }}\n}}\n")
                sh(["ip", "netns", "exec", self.ns(host), "nft", "-f", "-"], stdin=script)

    def _delete_table(self, table: str) -> None:
        for name in self.names.values():
            sh(["ip", "netns", "exec", name, "nft", "delete", "table", "netdev", table], check=False)

    def partition(self, a: str | None = None, b: str | None = None) -> None:
        """Drop every packet, both ways, on link a-b, on every link of a, or on every link (no FIN, no RST)."""
        self._drop_table("tf_partition", self.links_of(a, b), "drop")

    def heal(self) -> None:
        """Undo every partition()."""
        self._delete_table("tf_partition")

    def loss(self, percent: float, a: str | None = None, b: str | None = None) -> None:
        """Drop `percent` % of the packets at random, each way, on the links chosen as in partition();
        0 removes the loss (everywhere)."""
        self._delete_table("tf_loss")
        if percent:
            per_10k = round(percent * 100)
            self._drop_table("tf_loss", self.links_of(a, b), f"numgen random mod 10000 < {per_10k} drop")

    def rate(self, mbit: float, a: str | None = None, b: str | None = None) -> None:
        """Cap each direction of the chosen links at `mbit` Mbit/s (tbf on both ends' egress)."""
        burst = max(16_000, int(mbit * 1_250))  # bytes: 10 ms at the rate, at least ten packets
        for link in self.links_of(a, b):
            for host, dev in link.ends():
                sh(["tc", "-n", self.ns(host), "qdisc", "replace", "dev", dev, "root", "tbf",
                    "rate", f"{mbit}mbit", "burst", str(burst), "latency", "200ms"])

    def reset_connections(self, host: str) -> int:
        """Abort every established TCP connection of `host` to another namespace (`ss -K`): the peer gets
        an RST, the local end an error. Returns how many were aborted."""
        done = sh(["ip", "netns", "exec", self.ns(host), "ss", "-K", "-tnH", "state", "established",
                   "dst", "10.250.0.0/16"])
        return len([line for line in done.stdout.splitlines() if line.strip()])

    def latency(self, host: str, port: int, target: tuple[str, int], ms: float = 50, jitter: float = 20) -> Proc:
        """Start a delaying relay (relay.py) in `host`: it listens on `port` of every address of `host`
        and forwards each connection to `target`, every chunk delayed ms ± jitter ms each way (order
        kept). Returns its Proc once it listens."""
        proc = self.python(host, "relay.py", "--port", str(port), "--to", f"{target[0]}:{target[1]}",
                           "--ms", str(ms), "--jitter", str(jitter), name=f"{host}:relay")
        proc.wait_for(lambda events: any("listening" in e.data for e in events), timeout=30, what="listening")
        return proc

    def vanish(self, host: str) -> None:
        """The host disappears without a FIN: drop everything to and from it on all its links (never healed),
        then SIGKILL every process in its namespace."""
        self._drop_table("tf_vanish", self.links_of(host), "drop")
        kill_all_in(self.ns(host))
        for proc in self.procs:
            if proc.host == host:
                proc.kill()
