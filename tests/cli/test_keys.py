"""`tensorcom keys`: the files it writes (mode, format), refusal to overwrite, one-line usage errors,
and a round trip: the key files it writes secure a real socket pair."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tensorcom.cli import keys as keys_tool
from tensorcom.transport import security


def run_keys(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorcom", "keys", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd)


def test_keys_writes_a_private_pair_and_prints_it(tmp_path, capsys):
    assert keys_tool.main([str(tmp_path / "made"), "--name", "feeder"]) == 0
    secret, public = tmp_path / "made" / "feeder.key_secret", tmp_path / "made" / "feeder.key"
    assert os.stat(secret).st_mode & 0o777 == 0o600
    public_key, _ = security.read_key_pair(secret)
    assert security.read_public_key(public) == public_key
    assert "secret-key" not in public.read_text()
    out = capsys.readouterr().out
    assert str(secret) in out and str(public) in out and public_key.decode() in out


def test_keys_defaults_to_tensorcom_in_the_current_directory(tmp_path):
    out = run_keys(cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tensorcom.key", "tensorcom.key_secret"]


@pytest.mark.parametrize("existing", ["tensorcom.key_secret", "tensorcom.key"])
def test_keys_refuses_to_overwrite(tmp_path, existing):
    (tmp_path / existing).write_text("old key")
    out = run_keys(str(tmp_path))
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("tensorcom keys: error:") and existing in out.stderr and "overwrit" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]
    assert (tmp_path / existing).read_text() == "old key"


@pytest.mark.parametrize("args, expected", [
    (["--nmae", "x"], "did you mean '--name'?"),
    (["--name", "a/b"], "plain file name"),
    ([".", "extra"], "unrecognized arguments"),
])
def test_keys_usage_errors_are_one_line(tmp_path, args, expected):
    out = run_keys(*args, cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("tensorcom keys: error:") and expected in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_umbrella_lists_keys():
    out = subprocess.run([sys.executable, "-m", "tensorcom", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "keys" in out.stdout


@pytest.mark.net
def test_files_from_keys_secure_a_socket_pair(tmp_path):
    """Server and client key pairs from the tool; the client's public key in the server's clients
    directory: the client receives, a client with another pair does not."""
    zmq = pytest.importorskip("zmq")
    for args in ([str(tmp_path / "server")], [str(tmp_path / "clients"), "--name", "trainer"],
                 [str(tmp_path / "other"), "--name", "trainer"]):
        assert run_keys(*args).returncode == 0
    server_curve = security.Curve(secret=tmp_path / "server" / "tensorcom.key_secret", clients=tmp_path / "clients")
    context = zmq.Context()
    made, releases = [], []

    def socket(kind, curve, serving):
        sock = context.socket(kind)
        sock.linger = 0
        releases.append(security.secure(sock, curve, serving=serving))
        made.append(sock)
        return sock

    try:
        push = socket(zmq.PUSH, server_curve, True)
        push.bind("tcp://127.0.0.1:*")
        receivers = [socket(zmq.PULL, security.Curve(server=tmp_path / "server" / "tensorcom.key",
                                                     secret=tmp_path / name / "trainer.key_secret"), False)
                     for name in ("clients", "other")]
        for receiver in receivers:
            receiver.connect(push.last_endpoint.decode())
        push.sndtimeo = 5000
        push.send(b"batch")  # only the listed client's handshake completes, so it goes there
        assert receivers[0].poll(5000) and receivers[0].recv() == b"batch"
        push.send(b"batch")
        assert receivers[0].poll(5000) and not receivers[1].poll(300)
    finally:
        for sock in made:
            sock.close(linger=0)
        for release in releases:
            release()
        context.term()
