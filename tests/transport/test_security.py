"""tensorcom.transport.security: CURVE key files, configuration from arguments and environment, real
secured socket pairs on 127.0.0.1 for every pattern tensorcom uses (who gets data, who cannot inject),
the shared ZAP authenticator's lifetime, and the exposed-endpoint warning."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from pathlib import Path

import pytest
import zmq

from tensorcom import urls
from tensorcom.cli.common import Parser
from tensorcom.transport import security
from tensorcom.transport.security import Curve, CurveKeyError

ENV = ("TENSORCOM_CURVE_SECRET", "TENSORCOM_CURVE_SERVER", "TENSORCOM_CURVE_CLIENTS")

# (server socket type, client socket type, does the server bind?) with the schemes they stand for
PATTERNS = {
    "zrpush/zrpull": ("PUSH", "PULL", True),
    "zpush/zpull": ("PUSH", "PULL", False),
    "zpub/zsub": ("PUB", "SUB", True),
    "zrpub/zrsub": ("PUB", "SUB", False),
}


@pytest.fixture(autouse=True)
def no_curve_environment(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def keys(tmp_path):
    """Key pairs made on demand: keys("alice") -> KeyFiles in tmp_path/keys (made once per name)."""
    made = {}

    def make(name: str, directory: str = "keys") -> security.KeyFiles:
        if (directory, name) not in made:
            made[directory, name] = security.create_key_pair(tmp_path / directory, name)
        return made[directory, name]

    return make


class Net:
    """One zmq context and the sockets made in it; `close` closes each with linger 0, calls each
    socket's Release, and terminates the context."""

    def __init__(self):
        self.context = zmq.Context()
        self.sockets: list[zmq.Socket] = []
        self.releases: list[security.Release] = []

    def socket(self, kind: str, curve: Curve | None = None, serving: bool = False) -> zmq.Socket:
        sock = self.context.socket(getattr(zmq, kind))
        sock.linger = 0
        sock.rcvtimeo = sock.sndtimeo = 5000
        self.releases.append(security.secure(sock, curve, serving=serving))
        self.sockets.append(sock)
        if kind == "SUB":
            sock.subscribe(b"")
        return sock

    def close(self):
        for sock in self.sockets:
            sock.close(linger=0)
        for release in self.releases:
            release()
        self.context.term()


@pytest.fixture
def net():
    net = Net()
    yield net
    net.close()


def bind(sock: zmq.Socket) -> str:
    sock.bind("tcp://127.0.0.1:*")
    return sock.last_endpoint.decode()


def link(server: zmq.Socket, clients: list[zmq.Socket], server_binds: bool) -> None:
    """Connect the clients to the binding server, or the server to each binding client."""
    if server_binds:
        address = bind(server)
        for client in clients:
            client.connect(address)
    else:
        for client in clients:
            server.connect(bind(client))


def drain(sock: zmq.Socket) -> list[list[bytes]]:
    messages = []
    while sock.poll(0):
        messages.append(sock.recv_multipart())
    return messages


def pump(sender: zmq.Socket, good: list[zmq.Socket], bad: list[zmq.Socket], least: float = 0.7,
         most: float = 10.0, payload: bytes = b"batch") -> tuple[int, list[int]]:
    """Send `payload` every 10 ms (dropping what cannot leave now) for at least `least` seconds and
    until every `good` socket got one (at most `most` s); (messages the good got, messages each bad got)."""
    got, bad_got = [0] * len(good), [0] * len(bad)
    start = time.monotonic()
    while time.monotonic() - start < most and (time.monotonic() - start < least or 0 in got):
        with contextlib.suppress(zmq.Again):
            sender.send(payload, zmq.NOBLOCK)
        time.sleep(0.01)
        for i, sock in enumerate(good):
            got[i] += len(drain(sock))
        for i, sock in enumerate(bad):
            bad_got[i] += len(drain(sock))
    return min(got, default=0), bad_got


def server_curve(keys, clients: str | None = None) -> Curve:
    return Curve(secret=keys("server").secret, clients=clients)


# ---- secured pairs deliver -----------------------------------------------------------------------


@pytest.mark.net
@pytest.mark.parametrize("pattern", PATTERNS)
def test_secured_pair_delivers(net, keys, pattern):
    server_type, client_type, server_binds = PATTERNS[pattern]
    server = net.socket(server_type, server_curve(keys), serving=True)
    client = net.socket(client_type, Curve(server=keys("server").public))  # ephemeral client key pair
    link(server, [client], server_binds)
    got, _ = pump(server, [client], [], least=0)
    assert got >= 1
    assert server.getsockopt(zmq.MECHANISM) == client.getsockopt(zmq.MECHANISM) == zmq.CURVE
    assert server.curve_server and not client.curve_server


@pytest.mark.net
def test_secured_router_dealer_deliver_both_ways(net, keys):
    """zshare/zsplit (ROUTER, binds, CURVE server) and zjoin (DEALER, connects, CURVE client)."""
    router = net.socket("ROUTER", server_curve(keys), serving=True)
    dealer = net.socket("DEALER", Curve(server=keys("server").public, secret=keys("alice").secret))
    dealer.connect(bind(router))
    dealer.send(b"join")
    identity, message = router.recv_multipart()
    assert message == b"join"
    router.send_multipart([identity, b"batch"])
    assert dealer.recv() == b"batch"
    assert router.getsockopt(zmq.MECHANISM) == zmq.CURVE


# ---- who gets nothing --------------------------------------------------------------------------


@pytest.mark.net
@pytest.mark.parametrize("pattern", PATTERNS)
def test_clients_without_the_server_key_get_nothing(net, keys, pattern):
    server_type, client_type, server_binds = PATTERNS[pattern]
    server = net.socket(server_type, server_curve(keys), serving=True)
    good = net.socket(client_type, Curve(server=keys("server").public))
    wrong_key = net.socket(client_type, Curve(server=keys("other").public))
    plain = net.socket(client_type)  # no CURVE at all
    link(server, [good, wrong_key, plain], server_binds)
    got, bad = pump(server, [good], [wrong_key, plain])
    assert got >= 1 and bad == [0, 0]


@pytest.mark.net
def test_router_hears_nothing_from_dealers_without_the_server_key(net, keys):
    router = net.socket("ROUTER", server_curve(keys), serving=True)
    address = bind(router)
    good = net.socket("DEALER", Curve(server=keys("server").public))
    dealers = [good, net.socket("DEALER", Curve(server=keys("other").public)), net.socket("DEALER")]
    for dealer in dealers:
        dealer.connect(address)
    senders = _dealers_heard(router, dealers)
    assert senders == {b"dealer-0"}
    for dealer in dealers[1:]:
        assert not dealer.poll(200)


def _dealers_heard(router: zmq.Socket, dealers: list[zmq.Socket], seconds: float = 1.0) -> set[bytes]:
    """Each dealer sends `dealer-I` every 10 ms (the router answers each message) for `seconds`;
    the set of payloads the router received."""
    heard = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end or not heard:
        for i, dealer in enumerate(dealers):
            with contextlib.suppress(zmq.Again):
                dealer.send(f"dealer-{i}".encode(), zmq.NOBLOCK)
        time.sleep(0.01)
        for identity, message in drain(router):
            heard.add(message)
            router.send_multipart([identity, b"reply"])
        if time.monotonic() > end + 9:
            break
    return heard


@pytest.mark.net
@pytest.mark.parametrize("pattern", PATTERNS)
def test_restricted_server_serves_only_listed_clients(net, keys, tmp_path, pattern):
    """The attacker knows the server's public key and has a key pair of its own: without its key in
    the clients directory it gets nothing (nor does a client with an ephemeral key pair)."""
    server_type, client_type, server_binds = PATTERNS[pattern]
    keys("alice", directory="clients")
    server = net.socket(server_type, server_curve(keys, clients=tmp_path / "clients"), serving=True)
    alice = net.socket(client_type, Curve(server=keys("server").public, secret=keys("alice", "clients").secret))
    mallory = net.socket(client_type, Curve(server=keys("server").public, secret=keys("mallory").secret))
    ephemeral = net.socket(client_type, Curve(server=keys("server").public))
    link(server, [alice, mallory, ephemeral], server_binds)
    got, bad = pump(server, [alice], [mallory, ephemeral])
    assert got >= 1 and bad == [0, 0]


@pytest.mark.net
def test_restricted_router_hears_only_listed_dealers(net, keys, tmp_path):
    """An unlisted zjoin consumer can neither inject into a zshare server nor get batches from it."""
    keys("alice", directory="clients")
    router = net.socket("ROUTER", server_curve(keys, clients=tmp_path / "clients"), serving=True)
    address = bind(router)
    dealers = [net.socket("DEALER", Curve(server=keys("server").public, secret=keys("alice", "clients").secret)),
               net.socket("DEALER", Curve(server=keys("server").public, secret=keys("mallory").secret))]
    for dealer in dealers:
        dealer.connect(address)
    assert _dealers_heard(router, dealers) == {b"dealer-0"}
    assert dealers[0].poll(1000) and not dealers[1].poll(200)


@pytest.mark.net
@pytest.mark.parametrize("pattern", ["zpush/zpull", "zrpub/zrsub"])
def test_attackers_cannot_inject_into_a_binding_receiver(net, keys, pattern):
    """A receiver that binds (zpull, zrsub) is a CURVE client pinned to the server's key: a sender
    without the server's secret key (a key pair of its own, or no CURVE) cannot get a batch in."""
    server_type, client_type, _ = PATTERNS[pattern]
    receiver = net.socket(client_type, Curve(server=keys("server").public))
    address = bind(receiver)
    legit = net.socket(server_type, server_curve(keys), serving=True)
    impostor = net.socket(server_type, Curve(secret=keys("mallory").secret), serving=True)
    plain = net.socket(server_type)
    for sender in (legit, impostor, plain):
        sender.connect(address)
    received = set()
    start = time.monotonic()
    while time.monotonic() - start < 1.0 or (b"good" not in received and time.monotonic() - start < 10):
        for sender, payload in ((legit, b"good"), (impostor, b"evil"), (plain, b"evil")):
            with contextlib.suppress(zmq.Again):
                sender.send(payload, zmq.NOBLOCK)
        time.sleep(0.01)
        received.update(m[0] for m in drain(receiver))
    assert received == {b"good"}


# ---- the authenticator -------------------------------------------------------------------------


@pytest.mark.net
def test_each_restricted_socket_enforces_its_own_clients_in_one_context(net, keys, tmp_path):
    keys("alice", directory="for-1")
    keys("bob", directory="for-2")
    alice, bob = keys("alice", "for-1").secret, keys("bob", "for-2").secret
    first = net.socket("PUB", server_curve(keys, tmp_path / "for-1"), serving=True)
    second = net.socket("PUB", server_curve(keys, tmp_path / "for-2"), serving=True)
    anyone = net.socket("PUB", server_curve(keys), serving=True)  # unrestricted, same context
    assert security.authenticator_users(net.context) == 2
    server_key = keys("server").public
    subs = {name: [net.socket("SUB", Curve(server=server_key, secret=secret)) for _ in range(2)]
            for name, secret in (("alice", alice), ("bob", bob))}
    link(first, [subs["alice"][0], subs["bob"][0]], True)
    link(second, [subs["bob"][1], subs["alice"][1]], True)
    ephemeral = net.socket("SUB", Curve(server=server_key))
    link(anyone, [ephemeral], True)
    assert pump(first, [subs["alice"][0]], [subs["bob"][0]])[1] == [0]
    assert pump(second, [subs["bob"][1]], [subs["alice"][1]])[1] == [0]
    assert pump(anyone, [ephemeral], [])[0] >= 1


@pytest.mark.net
def test_authenticator_is_shared_and_stopped_by_the_last_release(keys, tmp_path):
    keys("alice", directory="clients")
    curve = server_curve(keys, tmp_path / "clients")
    context = zmq.Context()
    socks = [context.socket(zmq.PUSH) for _ in range(2)]
    releases = [security.secure(sock, curve, serving=True) for sock in socks]
    threads = threading.active_count()
    assert security.authenticator_users(context) == 2
    socks[0].close(linger=0)
    releases[0]()
    releases[0]()  # a second call does nothing
    assert security.authenticator_users(context) == 1
    socks[1].close(linger=0)
    releases[1]()
    assert security.authenticator_users(context) == 0
    assert threading.active_count() == threads - 1  # the authenticator's thread ended
    terminated = threading.Thread(target=context.term, daemon=True)
    terminated.start()
    terminated.join(5)
    assert not terminated.is_alive(), "context.term() hangs: something of the authenticator is still open"


@pytest.mark.net
def test_restricted_server_without_authenticator_admits_nobody(net, keys, tmp_path):
    """Fails closed: released (authenticator stopped) while the socket is still open, a restricted
    server refuses even a listed client instead of falling back to no authentication."""
    keys("alice", directory="clients")
    server = net.socket("PUB", server_curve(keys, tmp_path / "clients"), serving=True)
    net.releases[-1]()
    assert security.authenticator_users(net.context) == 0
    alice = net.socket("SUB", Curve(server=keys("server").public, secret=keys("alice", "clients").secret))
    link(server, [alice], True)
    assert pump(server, [], [alice], least=1.0)[1] == [0]


# ---- key files -------------------------------------------------------------------------------


def test_create_key_pair_writes_matching_files(tmp_path):
    files = security.create_key_pair(tmp_path / "new", "srv")
    assert files.secret == tmp_path / "new" / "srv.key_secret" and files.public == tmp_path / "new" / "srv.key"
    assert os.stat(files.secret).st_mode & 0o777 == 0o600
    public, secret = security.read_key_pair(files.secret)
    assert security.read_public_key(files.public) == public == files.public_key.encode()
    assert b"secret" not in files.public.read_bytes().split(b"curve")[-1]
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["srv.key", "srv.key_secret"]


@pytest.mark.parametrize("existing", ["x.key", "x.key_secret"])
def test_create_key_pair_never_overwrites(tmp_path, existing):
    (tmp_path / existing).write_text("precious")
    with pytest.raises(FileExistsError, match=existing):
        security.create_key_pair(tmp_path, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]
    assert (tmp_path / existing).read_text() == "precious"


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("case, why", [
    ("missing", "does not exist"),
    ("directory", "is not a file"),
    ("empty", "no public-key line"),
    ("public only", "holds no secret key"),
    ("short key", "malformed secret-key"),
    ("bad characters", "malformed public-key"),
    ("mismatched", "does not belong"),
])
def test_bad_secret_key_files_name_the_file(keys, tmp_path, case, why):
    pair = keys("a")
    public, secret = security.read_key_pair(pair.secret)
    path = {
        "missing": tmp_path / "nope.key_secret",
        "directory": tmp_path,
        "empty": _write(tmp_path, "e.key_secret", ""),
        "public only": pair.public,
        "short key": _write(tmp_path, "s", f'curve\n public-key = "{public.decode()}"\n secret-key = "abc"\n'),
        "bad characters": _write(tmp_path, "c", f'public-key = "{"~" * 40}"\nsecret-key = "{secret.decode()}"\n'),
        "mismatched": _write(tmp_path, "m", f'public-key = "{keys("b").public_key}"\n'
                             f'secret-key = "{secret.decode()}"\n'),
    }[case]
    with pytest.raises(CurveKeyError, match=why) as info:
        Curve(secret=path).check()
    assert str(path) in str(info.value) and info.value.path == str(path)
    assert isinstance(info.value, ValueError)


def test_unreadable_key_file_names_the_file(keys, monkeypatch):
    path = keys("a").secret

    def refuse(filename):  # what open() raises for a file without read permission (root reads any)
        raise PermissionError(13, "Permission denied", str(filename))

    monkeypatch.setattr(security.zmq.auth, "load_certificate", refuse)
    with pytest.raises(CurveKeyError, match="cannot read CURVE secret key file: Permission denied") as info:
        security.read_key_pair(path)
    assert str(path) in str(info.value)


def test_clients_directory_errors(keys, tmp_path):
    with pytest.raises(CurveKeyError, match="does not exist"):
        security.read_client_keys(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CurveKeyError, match="no \\*.key files"):
        security.read_client_keys(tmp_path / "empty")
    keys("a", directory="ok")
    keys("b", directory="ok")
    assert security.read_client_keys(tmp_path / "ok") == {keys("a", "ok").public_key.encode(),
                                                          keys("b", "ok").public_key.encode()}
    _write(tmp_path / "ok", "junk.key", "hello")
    with pytest.raises(CurveKeyError, match="junk.key"):
        security.read_client_keys(tmp_path / "ok")


def test_curve_needs_a_role_and_clients_need_a_secret(keys):
    with pytest.raises(ValueError, match="needs secret="):
        Curve()
    with pytest.raises(ValueError, match="secret=NAME.key_secret"):
        Curve(server=keys("s").public, clients="dir")
    with pytest.raises(ValueError, match="--curve-server"):
        Curve(secret=keys("s").secret).check(serving=False)
    with pytest.raises(ValueError, match="--curve-secret"):
        Curve(server=keys("s").public).check(serving=True)


# ---- configuration from arguments and environment ------------------------------------------------


def test_settings_read_the_curve_variables(monkeypatch, tmp_path):
    from tensorcom import settings

    assert (settings.curve_secret(), settings.curve_server(), settings.curve_clients()) == (None, None, None)
    monkeypatch.setenv("TENSORCOM_CURVE_SECRET", "  ")
    monkeypatch.setenv("TENSORCOM_CURVE_SERVER", "~/feeder.key")
    monkeypatch.setenv("TENSORCOM_CURVE_CLIENTS", str(tmp_path))
    assert settings.curve_secret() is None
    assert settings.curve_server() == Path("~/feeder.key").expanduser()
    assert settings.curve_clients() == tmp_path


def test_curve_from_nothing_is_none():
    assert security.curve_from() is None
    assert security.curve_from(serving=True) is None
    assert security.curve_from(serving=False) is None


def test_curve_from_environment(monkeypatch, keys, tmp_path):
    keys("alice", directory="clients")
    monkeypatch.setenv("TENSORCOM_CURVE_SECRET", str(keys("server").secret))
    monkeypatch.setenv("TENSORCOM_CURVE_CLIENTS", str(tmp_path / "clients"))
    monkeypatch.setenv("TENSORCOM_CURVE_SERVER", str(keys("server").public))
    assert security.curve_from(serving=True) == Curve(keys("server").secret, None, tmp_path / "clients")
    monkeypatch.setenv("TENSORCOM_CURVE_SECRET", str(keys("alice", "clients").secret))
    assert security.curve_from(serving=False) == Curve(keys("alice", "clients").secret, keys("server").public)
    explicit = security.curve_from(secret=keys("bob").secret, serving=False)  # explicit beats $
    assert explicit == Curve(keys("bob").secret, keys("server").public)


def test_curve_from_environment_reports_bad_files(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORCOM_CURVE_SERVER", str(tmp_path / "missing.key"))
    with pytest.raises(CurveKeyError, match="missing.key"):
        security.curve_from(serving=False)
    assert security.curve_from(serving=True) is None  # a sender does not use $TENSORCOM_CURVE_SERVER


def test_curve_from_refuses_the_other_roles_paths(keys, tmp_path):
    with pytest.raises(ValueError, match="for receivers"):
        security.curve_from(server=keys("s").public, serving=True)
    with pytest.raises(ValueError, match="--curve-clients"):
        security.curve_from(clients=tmp_path, serving=False)


@pytest.mark.net
@pytest.mark.parametrize("pattern", ["zpush/zpull", "zpub/zsub"])
def test_environment_configured_pair_delivers(net, monkeypatch, keys, tmp_path, pattern):
    server_type, client_type, server_binds = PATTERNS[pattern]
    keys("alice", directory="clients")
    monkeypatch.setenv("TENSORCOM_CURVE_SECRET", str(keys("server").secret))
    monkeypatch.setenv("TENSORCOM_CURVE_CLIENTS", str(tmp_path / "clients"))
    server = net.socket(server_type, security.curve_from(serving=True), serving=True)
    monkeypatch.setenv("TENSORCOM_CURVE_SECRET", str(keys("alice", "clients").secret))
    monkeypatch.setenv("TENSORCOM_CURVE_SERVER", str(keys("server").public))
    client = net.socket(client_type, security.curve_from(serving=False))
    monkeypatch.setenv("TENSORCOM_CURVE_SECRET", str(keys("mallory").secret))
    intruder = net.socket(client_type, security.curve_from(serving=False))
    link(server, [client, intruder], server_binds)
    got, bad = pump(server, [client], [intruder])
    assert got >= 1 and bad == [0]


def test_curve_arguments_per_role(keys, tmp_path):
    keys("alice", directory="clients")
    sender = Parser(prog="sender")
    security.add_curve_arguments(sender, serving=True)
    args = sender.parse_args(["--curve-secret", str(keys("server").secret),
                              "--curve-clients", str(tmp_path / "clients")])
    assert security.curve_from_args(args, serving=True) == Curve(keys("server").secret, None, tmp_path / "clients")
    with pytest.raises(SystemExit):
        sender.parse_args(["--curve-server", "x.key"])
    receiver = Parser(prog="receiver")
    security.add_curve_arguments(receiver, serving=False)
    args = receiver.parse_args(["--curve-server", str(keys("server").public)])
    assert security.curve_from_args(args, serving=False) == Curve(server=keys("server").public)
    assert security.curve_from_args(receiver.parse_args([]), serving=False) is None
    both = Parser(prog="both")
    security.add_curve_arguments(both)
    assert {"--curve-secret", "--curve-server", "--curve-clients"} <= set(both._option_string_actions)


def test_secure_without_curve_sets_nothing():
    context = zmq.Context()
    try:
        sock = context.socket(zmq.PUSH)
        security.secure(sock, None, serving=True)()
        assert sock.getsockopt(zmq.MECHANISM) == zmq.NULL
        sock.close(linger=0)
    finally:
        context.term()


# ---- the warning ----------------------------------------------------------------------------------


@pytest.fixture
def fresh_warning(monkeypatch):
    monkeypatch.setattr(security, "_warned", False)


@pytest.mark.parametrize("url", ["zpub://*:7880", "zpull://0.0.0.0:7880", "zshare://[::]:7880",
                                 "zrsub://*:*", "zrpush://[0:0:0:0:0:0:0:0]:9"])
def test_warn_if_exposed_warns_once(fresh_warning, url):
    endpoint = urls.parse(url)
    with pytest.warns(security.ExposedEndpointWarning, match="tensorcom keys") as record:
        assert security.warn_if_exposed(endpoint, None)
    assert url in str(record[0].message) and "TENSORCOM_CURVE_SECRET" in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not security.warn_if_exposed(endpoint, None)  # once per process
        assert not security.warn_if_exposed(urls.parse("zpub://*:7881"), None)


@pytest.mark.parametrize("url", ["zpub://127.0.0.1:7880", "zpub://localhost:7880", "zpub+ipc:///tmp/x",
                                 "zsub://0.0.0.0:7880", "zpull://[::1]:7880", "zpub://10.1.2.3:7880"])
def test_warn_if_exposed_is_quiet_for_loopback_and_connecting_sides(fresh_warning, url):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not security.warn_if_exposed(urls.parse(url), None)


def test_warn_if_exposed_is_quiet_with_curve(fresh_warning, keys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not security.warn_if_exposed(urls.parse("zpub://*:7880"), Curve(secret=keys("s").secret))
    assert not security._warned  # a secured endpoint does not use up the one warning
