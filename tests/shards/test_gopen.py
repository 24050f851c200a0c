"""gopen against real things: files, pipes, stdin, a local HTTP server and moto's S3 server."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tensorcom.errors import OpenError
from tensorcom.shards._schemes import scheme_of
from tensorcom.shards.gopen import gopen


def test_scheme_table():
    assert [scheme_of(u) for u in ("a/b.tar", "file:///x", "HTTP://h/x", "pipe:cat x", "-", "s3://b/k")] == [
        "file", "file", "http", "pipe", "-", "s3"]


def test_local_paths_and_file_urls(tmp_path):
    path = tmp_path / "x.bin"
    with gopen(str(path), "wb") as f:
        f.write(b"hello")
    assert gopen(path).read() == b"hello"
    with gopen(f"file://{path}") as f:
        assert f.read() == b"hello"
    with pytest.raises(OpenError) as info:
        gopen(str(tmp_path / "missing.tar"))
    assert info.value.url.endswith("missing.tar") and "missing.tar" in str(info.value)


def test_bad_arguments():
    with pytest.raises(TypeError):
        gopen(123)
    with pytest.raises(ValueError):
        gopen("x.tar", "r+b")
    with pytest.raises(TypeError, match="retries"):
        gopen("x.tar", retries=3)


def test_pipe_read_write_and_exit_status(tmp_path):
    target = tmp_path / "out.bin"
    with gopen(f"pipe:cat > {target}", "wb") as f:
        f.write(b"through a pipe")
    with gopen(f"pipe:cat {target}") as f:
        assert f.read() == b"through a pipe"
    with pytest.raises(OpenError, match="exit 3") as info:
        with gopen("pipe:echo partial; exit 3") as f:
            f.read()
    assert "exited with status 3" in str(info.value)
    with pytest.raises(OpenError, match="status 5"):
        with gopen("pipe:cat > /dev/null; exit 5", "wb") as f:
            f.write(b"x")


def test_pipe_command_outliving_its_timeout_is_an_open_error():
    """The writer's command never exits by itself: close() waits `timeout`, kills it, names it."""
    with pytest.raises(OpenError, match=r"'cat > /dev/null; sleep 30'.*still running after 0.5 s") as info:
        with gopen("pipe:cat > /dev/null; sleep 30", "wb", timeout=0.5) as f:
            f.write(b"x")
    assert info.value.url == "pipe:cat > /dev/null; sleep 30"


def test_pipe_closed_early_is_quiet():
    with gopen("pipe:yes") as f:
        assert len(f.read(100000)) == 100000  # closing kills `yes` without an error


@pytest.mark.procs
def test_stdin_dash(tmp_path):
    code = "from tensorcom.shards.gopen import gopen; import sys; sys.stdout.write(gopen('-').read().decode()[::-1])"
    out = subprocess.run([sys.executable, "-c", code], input=b"abc", capture_output=True, timeout=60)
    assert out.returncode == 0 and out.stdout == b"cba"


@pytest.mark.net
def test_http_stream_statuses_and_retries(http_server):
    payload = bytes(range(256)) * 8000
    (http_server.root / "data.bin").write_bytes(payload)
    assert gopen(f"{http_server.url}/data.bin").read() == payload
    with pytest.raises(OpenError, match="404") as info:
        gopen(f"{http_server.url}/gopen-missing.tar")
    assert info.value.url == f"{http_server.url}/gopen-missing.tar"
    assert http_server.requests["/gopen-missing.tar"] == 1  # 4xx is final: no retries
    with pytest.raises(OpenError, match="500"):
        gopen(f"{http_server.url}/status/500/retried.tar", retries=2, backoff=0.01)
    assert http_server.requests["/status/500/retried.tar"] == 3
    assert gopen(f"{http_server.url}/flaky/2/data.bin", backoff=0.01).read() == payload


@pytest.mark.net
def test_http_resumes_a_dropped_stream(http_server):
    payload = bytes(range(256)) * 4000
    (http_server.root / "drop.bin").write_bytes(payload)
    with gopen(f"{http_server.url}/drop/drop.bin", backoff=0.01, bufsize=65536) as f:
        assert f.read() == payload
    assert http_server.requests["/drop/drop.bin"] == 2


@pytest.mark.net
def test_http_connection_refused(free_port):
    with pytest.raises(OpenError, match="HTTP request failed"):
        gopen(f"http://127.0.0.1:{free_port()}/x.tar", retries=1, backoff=0.01, timeout=2)


@pytest.mark.net
@pytest.mark.procs
def test_s3_read_write_missing_and_denied(s3_server, free_port):
    from servers import start_moto, stop_process

    client = s3_server.client()
    client.create_bucket(Bucket="gopen-test")
    client.put_object(Bucket="gopen-test", Key="a/x.tar", Body=b"stored bytes")
    assert gopen("s3://gopen-test/a/x.tar").read() == b"stored bytes"
    with gopen("s3://gopen-test/a/w.bin", "wb") as f:
        f.write(b"written by gopen")
    assert client.get_object(Bucket="gopen-test", Key="a/w.bin")["Body"].read() == b"written by gopen"
    with pytest.raises(OpenError, match="FileNotFound") as info:
        gopen("s3://gopen-test/a/missing.tar")
    assert info.value.url == "s3://gopen-test/a/missing.tar"
    port = free_port()
    denying = start_moto(port, env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})  # every request needs real IAM keys
    try:
        with pytest.raises(OpenError, match="Permission|Forbidden|Denied"):
            gopen("s3://gopen-test/a/x.tar", endpoint_url=f"http://127.0.0.1:{port}")
    finally:
        stop_process(denying)


def test_fsspec_memory_protocol():
    with gopen("memory://tc/gopen.bin", "wb") as f:
        f.write(b"in memory")
    assert gopen("memory://tc/gopen.bin").read() == b"in memory"
    with pytest.raises(OpenError, match="memory://tc/none"):
        gopen("memory://tc/none.bin")


@pytest.mark.parametrize("url,mode", [("pipe:cat", "ab"), ("http://127.0.0.1:1/x.tar", "wb"),
                                      ("memory://bucket/x.tar", "ab")])
def test_unsupported_modes_name_the_url(url, mode):
    with pytest.raises(ValueError, match=rf"mode '{mode}' is not supported for '{url}'"):
        gopen(url, mode)
