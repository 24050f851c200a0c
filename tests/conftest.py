"""Shared fixtures: loopback ports, ipc paths, and processes that are always cleaned up.

Socket tests use `free_port` / `ipc_path`; anything that starts a process goes through `processes`
(multiprocessing, spawn context) or `popen` (a subprocess), both of which kill what is left at teardown.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def soon(condition, seconds: float = 20.0) -> bool:
    """Whether condition() holds within `seconds` (looked at every 10 ms): a test waits for a state
    another thread or process reaches, never for a guessed time."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (an ended child nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def free_port():
    """Call to get a fresh free loopback port."""
    return find_free_port


@pytest.fixture
def ipc_path():
    """Call to get a fresh path for an ipc:// socket in a private temp dir (short, under /tmp)."""
    tmp = tempfile.mkdtemp(prefix="tc-ipc-", dir="/tmp")
    count = iter(range(10**6))

    def make() -> str:
        return os.path.join(tmp, f"s{next(count)}")

    yield make
    for name in os.listdir(tmp):
        os.unlink(os.path.join(tmp, name))
    os.rmdir(tmp)


@pytest.fixture
def inproc_pair():
    """(sender, receiver): two connected ZeroMQ PAIR sockets over inproc, 5 s timeouts, closed after."""
    zmq = pytest.importorskip("zmq")
    context = zmq.Context()
    sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    receiver.rcvtimeo = sender.sndtimeo = 5000
    receiver.bind("inproc://pair")
    sender.connect("inproc://pair")
    yield sender, receiver
    sender.close(linger=0)
    receiver.close(linger=0)
    context.term()


class ProcessGroup:
    """Starts multiprocessing.Process objects (spawn) and kills every survivor on close."""

    def __init__(self):
        self.context = multiprocessing.get_context("spawn")
        self.started: list = []

    def start(self, target, *args, **kwargs):
        """Start target(*args, **kwargs) in a new spawned process; returns the Process."""
        proc = self.context.Process(target=target, args=args, kwargs=kwargs, daemon=True)
        proc.start()
        self.started.append(proc)
        return proc

    def close(self):
        for proc in self.started:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)


@pytest.fixture
def processes():
    group = ProcessGroup()
    yield group
    group.close()


class PopenGroup:
    """Starts subprocesses in their own process group and kills each group on close."""

    def __init__(self):
        self.started: list[subprocess.Popen] = []

    def start(self, args, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(args, start_new_session=True, **kwargs)
        self.started.append(proc)
        return proc

    def python(self, *args, **kwargs) -> subprocess.Popen:
        """Start `python ARGS` with this interpreter."""
        return self.start([sys.executable, *args], **kwargs)

    def close(self):
        for proc in self.started:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for stream in (proc.stdout, proc.stderr, proc.stdin):
                if stream:
                    stream.close()


@pytest.fixture
def popen():
    group = PopenGroup()
    yield group
    group.close()


@pytest.fixture(params=["c", "python"])
def tar_scanner(request, monkeypatch):
    """Run the test with the C tar scanner, then with the pure-Python one, chosen through
    $TENSORCOM_PURE_PYTHON as users choose it; returns "c" or "python" (skips "c" when not built)."""
    from tensorcom.shards import _tarscan as tarscan

    if request.param == "c":
        if tarscan.scan_c is None:
            pytest.skip("tensorcom.shards._ctarscan is not built (no C compiler at install time)")
        monkeypatch.delenv("TENSORCOM_PURE_PYTHON", raising=False)
    else:
        monkeypatch.setenv("TENSORCOM_PURE_PYTHON", "1")
    assert tarscan.scanner() is (tarscan.scan_c if request.param == "c" else tarscan.scan_python)
    return request.param


# --- shard test servers (tests/servers.py): a directory over HTTP, moto's S3 server ---


@pytest.fixture(scope="session")
def http_server(tmp_path_factory):
    """A threaded HTTP server on 127.0.0.1 for a fresh directory: `.root` (Path) to put files in,
    `.url` (base URL), `.requests` (count per path); test routes /status/N/, /flaky/N/, /drop/, /cut/N/."""
    from servers import FileServer

    server = FileServer(tmp_path_factory.mktemp("http-root"))
    yield server
    server.stop()


class S3Server:
    """A running moto S3 server: `.endpoint`, `.port`, and `client()` for a boto3 S3 client."""

    def __init__(self, port: int):
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}"

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")


S3_TEST_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_SESSION_TOKEN": "", "AWS_SECURITY_TOKEN": ""}


@pytest.fixture(scope="session")
def s3_server():
    """moto's standalone S3 server on 127.0.0.1 (a subprocess, killed at teardown); sets
    AWS_ENDPOINT_URL and fake credentials in os.environ for the session and restores them after."""
    from servers import start_moto, stop_process

    port = find_free_port()
    env = dict(S3_TEST_ENV, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
    saved = {name: os.environ.get(name) for name in env}
    for name, value in env.items():
        if value:
            os.environ[name] = value
        else:
            os.environ.pop(name, None)
    proc = start_moto(port)
    try:
        yield S3Server(port)
    finally:
        stop_process(proc)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# --- /dev/shm: nothing of ours outlives the test session ---

SHM = "/dev/shm"
SHM_PATTERNS = ("tensorcom-*", "sem.mp-*")  # our segments; multiprocessing's named semaphores
CLONE_NEWNS, MS_REC, MS_SLAVE, MS_NOSUID, MS_NODEV = 0x20000, 1 << 14, 1 << 19, 2, 4


def pytest_addoption(parser):
    parser.addoption("--shared-dev-shm", action="store_true",
                     help="check the machine's /dev/shm before and after the session instead of giving the "
                          "session a /dev/shm of its own (entries of other processes may then be counted)")


def shm_entries() -> set[str]:
    """The names in /dev/shm matching SHM_PATTERNS (empty where there is no /dev/shm)."""
    import fnmatch

    try:
        names = os.listdir(SHM)
    except OSError:
        return set()
    return {name for name in names if any(fnmatch.fnmatch(name, p) for p in SHM_PATTERNS)}


def private_shm() -> str | None:
    """Give this process, and every process it starts from now on, a /dev/shm of its own: a new mount
    namespace (mounts received from the host, none sent back) with an empty tmpfs on /dev/shm. Returns
    None when done, else why not (not Linux, no /dev/shm, not allowed: not root)."""
    import ctypes

    if not sys.platform.startswith("linux") or not os.path.isdir(SHM):
        return "no Linux /dev/shm here"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}"
    if (libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None) != 0
            or libc.mount(b"tmpfs", SHM.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777") != 0):
        raise OSError(ctypes.get_errno(), "mounting a private /dev/shm in the session's mount namespace")
    return None


@pytest.fixture(scope="session", autouse=True)
def nothing_left_in_shm(request):
    """Fails the session (an error at its last teardown, so a non-zero exit status) when /dev/shm holds
    entries matching SHM_PATTERNS at the end that were not there at the start, naming them.

    Only entries made by the suite's own processes count. Named semaphores and segments do not record
    who made them, so the session makes that true by construction: before the first test, the pytest
    process moves into a mount namespace of its own with an empty tmpfs on /dev/shm (private_shm). Every
    process the suite starts (subprocesses, spawned workers, their resource trackers, processes in the
    fault harness's network namespaces) inherits it; no process outside the session sees it, so another
    session's entries can neither appear in it nor be counted, and what the suite leaves dies with its
    last process instead of filling the machine's /dev/shm. Where that is not allowed (not root) or with
    --shared-dev-shm, the machine's /dev/shm is compared instead, and the message says that other
    processes on the host may have made what is named."""
    why = "--shared-dev-shm" if request.config.getoption("--shared-dev-shm") else private_shm()
    before = shm_entries()
    yield
    import gc

    gc.collect()  # primitives of this process unlink their names when collected
    # A process SIGKILLed alone leaves what it made to its resource tracker, which unlinks it once every
    # process sharing the tracker has gone: a sharing server's handoff segments (tensorcom-*, batches of
    # handoff.MIN_BYTES or more to a consumer on this host), and where worker semaphores have names (C
    # libraries other than glibc: tensorcom.pipeline._semaphores) the sem.mp-* of a server killed before
    # every worker had opened them. With glibc worker semaphores have no name, and multiprocessing's heap file
    # (pym-*) is unlinked in the call that makes it: neither needs this wait.
    soon(lambda: not shm_entries() - before, 10.0)
    left = sorted(shm_entries() - before)
    if left:
        where = f"the session's own {SHM}" if why is None else f"{SHM} (shared with this host's other processes: {why})"
        pytest.fail(f"the tests left {len(left)} entries in {where}: {', '.join(left)}", pytrace=False)


# --- one Ray instance per pytest process ---


@pytest.fixture(scope="session")
def ray_instance():
    """The ray module, initialised once for the session: ray.init(num_cpus=2) on 127.0.0.1, shut down at
    its end. The tests that start Ray actors (tests/adapters/test_ray.py, test_ray_reconnect.py) carry
    `@pytest.mark.xdist_group("ray")`, so that with `pytest -n 3 --dist loadgroup` one worker runs them all
    on one instance (starting one takes about 5 s). Skipped where Ray is not installed."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    yield ray
    ray.shutdown()


# --- the long tests start first ---


def pytest_collection_modifyitems(config, items):
    """Slow tests outside an xdist group (notebooks, long examples) run first, so that none of them ends the
    run alone on one worker. The fault matrix's slow cells keep their place: started all together they made
    the suite take 10.5 min on two cores."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None or
               item.get_closest_marker("xdist_group") is not None)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """On a pytest-xdist worker of `--dist loadgroup`, every test with an xdist_group mark must carry its
    group in its id (xdist's way of sending a group to one worker). A pytest that xdist cannot rename
    (9.2 with xdist 3.8) would silently spread a group over all workers: each would run the fault
    matrix's whole group and start its own Ray instance. constraints.txt pins a pytest that works."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    ungrouped = [item.nodeid for item in session.items
                 if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid]
    if ungrouped:
        raise pytest.UsageError(f"xdist_group marks are ignored by this pytest {pytest.__version__} and xdist "
                                f"(e.g. {ungrouped[0]}): install the pytest pinned in constraints.txt")


# --- tests that start JAX (or that fork) run in an interpreter of their own ---

ISOLATED = "TENSORCOM_TEST_ISOLATED"  # set in the interpreter an isolated test runs in


def pytest_pyfunc_call(pyfuncitem):
    """An `isolated` test runs as `python -m pytest NODEID` in a subprocess (110 s at most); its failure, with
    the subprocess's output, or its skip is this test's. Inside that subprocess the test runs as usual."""
    if pyfuncitem.get_closest_marker("isolated") is None or os.environ.get(ISOLATED):
        return None
    import re

    command = [sys.executable, "-m", "pytest", pyfuncitem.nodeid, "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist"]
    try:
        done = subprocess.run(command, cwd=pyfuncitem.config.rootpath, env={**os.environ, ISOLATED: "1"},
                              capture_output=True, text=True, timeout=110)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"isolated run of {pyfuncitem.nodeid} took over {exc.timeout} s", pytrace=False)
    skipped = re.search(r"^SKIPPED \[\d+\] (.*)$", done.stdout, re.M)
    if done.returncode == 0 and skipped:
        pytest.skip(skipped.group(1))
    if done.returncode != 0 or not re.search(r"\b1 passed\b", done.stdout):
        pytest.fail(f"isolated run of {pyfuncitem.nodeid} (exit status {done.returncode}):\n{done.stdout[-6000:]}"
                    f"{done.stderr[-2000:]}", pytrace=False)
    return True


@pytest.fixture(autouse=True)
def no_jax_threads_here(request):
    """Fails a test that started JAX's runtime (its backends, and with them its threads) in the test process,
    where a later fork by another test (Ray, a fork-context DataLoader) would run into them: such a test is
    marked `isolated`. (pyproject's filterwarnings also makes JAX's own fork warning an error.)"""
    before = jax_started()
    yield
    if jax_started() and not before and not os.environ.get(ISOLATED):
        pytest.fail(f"{request.node.nodeid} started JAX in the test process: mark it isolated", pytrace=False)


def jax_started() -> bool:
    """Whether this process has initialized JAX's backends (only then has JAX threads and a fork hook)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))
