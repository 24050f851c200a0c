"""Writers never leave a partial file under a final name: exceptions, failed writes, SIGKILL, S3, tools."""

from __future__ import annotations

import fnmatch
import json
import os
import random
import select
import signal
import subprocess
import tarfile
import threading
import time

import pytest

from tensorcom.errors import OpenError
from tensorcom.shards import ShardWriter, TarWriter, samples
from tensorcom.shards.gopen import gopen

KILL_RUNS, KILL_PER_SHARD, KILL_SIZE, WAIT_S = 7, 40, 2000, 30


def sample(i: int, size: int = 100) -> dict:
    """Sample i: its key, number and content can all be checked on reading back."""
    return {"__key__": f"k{i:05d}", "txt": f"sample {i}", "bin": bytes([i % 251]) * (size + i % 300)}


def check_shard(path: str, numbers: range, size: int = 100) -> None:
    """The shard at `path` reads back whole, with exactly the samples `numbers` (made with `size`)."""
    with gopen(path) as stream, tarfile.open(fileobj=stream, mode="r|*") as tar:  # the whole archive
        assert len(tar.getmembers()) == 2 * len(numbers), path
    got = list(samples(path))
    assert [s["__key__"] for s in got] == [f"k{i:05d}" for i in numbers], path
    for s, i in zip(got, numbers):
        assert s["txt"] == f"sample {i}".encode() and s["bin"] == sample(i, size)["bin"], (path, i)


def notes(exc: BaseException) -> str:
    return "\n".join(getattr(exc, "__notes__", []))


@pytest.mark.parametrize("name", ["out.tar", "out.tgz"])
def test_exception_in_with_leaves_no_file_and_no_temp(tmp_path, name):
    target = tmp_path / name
    with pytest.raises(RuntimeError, match="stop") as info:
        with TarWriter(str(target)) as writer:
            for i in range(5):
                writer.write(sample(i))
            [temp] = os.listdir(tmp_path)  # written beside the target, under a hidden name
            assert temp.startswith(f".{name}.tmp-{os.getpid()}-")
            raise RuntimeError("stop")
    assert os.listdir(tmp_path) == []
    assert f"abandoned shard {target} holding 5 samples" in notes(info.value)
    assert writer.abandoned in notes(info.value) and writer.abort() == writer.abandoned
    with pytest.raises(ValueError, match="abandoned"):
        writer.write(sample(6))
    writer.close()  # an abandoned writer is not completed by close()
    assert os.listdir(tmp_path) == []


def test_failure_keeps_the_previous_file_and_success_replaces_it(tmp_path):
    target = str(tmp_path / "same.tar")
    with TarWriter(target) as writer:
        writer.write(sample(1))
    before = (tmp_path / "same.tar").read_bytes()
    with pytest.raises(KeyError):
        with TarWriter(target) as writer:
            writer.write(sample(2))
            raise KeyError("x")
    assert (tmp_path / "same.tar").read_bytes() == before and os.listdir(tmp_path) == ["same.tar"]
    with TarWriter(target) as writer:
        writer.write(sample(3))
    check_shard(target, range(3, 4))
    assert os.listdir(tmp_path) == ["same.tar"]


def test_explicit_abort(tmp_path):
    writer = TarWriter(str(tmp_path / "a.tar"))
    writer.write(sample(0))
    assert writer.abort() == f"abandoned shard {tmp_path / 'a.tar'} holding 1 sample: nothing was left under that name"
    writer.close()
    sink = ShardWriter(str(tmp_path / "s-%02d.tar"), maxcount=2)
    for i in range(3):
        sink.write(sample(i))
    assert "s-01.tar holding 1 sample" in sink.abort()
    sink.close()
    assert os.listdir(tmp_path) == ["s-00.tar"] and sink.shards == [str(tmp_path / "s-00.tar")]
    with pytest.raises(ValueError, match="stopped"):
        sink.write(sample(9))


def test_shard_writer_exception_keeps_completed_shards(tmp_path):
    closed: list[str] = []
    with pytest.raises(ZeroDivisionError) as info:
        with ShardWriter(str(tmp_path / "s-%03d.tar"), maxcount=4, post=closed.append) as sink:
            for i in range(10):
                sink.write(sample(i))
            1 / 0
    assert sorted(os.listdir(tmp_path)) == ["s-000.tar", "s-001.tar"]
    assert closed == sink.shards == [str(tmp_path / "s-000.tar"), str(tmp_path / "s-001.tar")]
    assert f"abandoned shard {tmp_path / 's-002.tar'} holding 2 samples" in notes(info.value)
    check_shard(closed[0], range(0, 4))
    check_shard(closed[1], range(4, 8))


FAILING_WRITE = """
import json, resource, signal, sys
from tensorcom.errors import OpenError, ShardError
from tensorcom.shards import ShardWriter
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file over the limit is then an EFBIG error, not a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
sink = ShardWriter(sys.argv[1], maxcount=3, bufsize=4096)
report = {}
try:
    with sink:
        for i in range(10):
            sink.write({"__key__": f"k{i}", "bin": bytes(300_000 if i == 7 else 40_000)})
except OpenError as exc:
    report.update(error=str(exc), notes=exc.__notes__, shards=sink.shards)
try:
    sink.close()
except ShardError as exc:
    report["close"] = str(exc)
print(json.dumps(report))
"""


@pytest.mark.procs
@pytest.mark.timeout(60)
def test_shard_writer_failed_write_abandons_the_shard(popen, tmp_path):
    proc = popen.python("-c", FAILING_WRITE, str(tmp_path / "f-%02d.tar"), stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0
    report = json.loads(out)
    assert sorted(os.listdir(tmp_path)) == ["f-00.tar", "f-01.tar"]
    assert report["shards"] == [str(tmp_path / "f-00.tar"), str(tmp_path / "f-01.tar")]
    assert f"{tmp_path / 'f-02.tar'}:k7.bin: write failed" in report["error"]
    assert f"abandoned shard {tmp_path / 'f-02.tar'} holding 1 sample:" in report["notes"][0]
    assert "close() after a failure" in report["close"] and "f-02.tar" in report["close"]
    assert len(list(samples(report["shards"]))) == 6


def test_memory_fsspec_destination(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    with pytest.raises(RuntimeError):
        with TarWriter("memory://atomic/bad.tar") as writer:
            writer.write(sample(0))
            raise RuntimeError("stop")
    assert not memory.exists("/atomic/bad.tar")
    with TarWriter("memory://atomic/good.tar") as writer:
        writer.write(sample(1))
    assert [s["__key__"] for s in samples("memory://atomic/good.tar")] == ["k00001"]


def test_special_targets(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    with TarWriter(str(fifo)) as writer:  # not a regular file: written in place
        writer.write(sample(0))
    reader.join(timeout=WAIT_S)
    assert fifo.is_fifo() and received and received[0][:6] == b"k00000"
    (tmp_path / "real").mkdir()
    (tmp_path / "link.tar").symlink_to(tmp_path / "real" / "target.tar")
    with TarWriter(str(tmp_path / "link.tar")) as writer:  # through the link, beside its target
        writer.write(sample(1))
    assert (tmp_path / "link.tar").is_symlink() and os.listdir(tmp_path / "real") == ["target.tar"]
    check_shard(str(tmp_path / "link.tar"), range(1, 2))
    with pytest.raises(OpenError, match="is a directory"):
        TarWriter(str(tmp_path / "real"))


def test_pipe_destination_is_closed_and_the_error_raised(tmp_path):
    with pytest.raises(RuntimeError) as info:
        with TarWriter(f"pipe:cat > {tmp_path / 'piped.tar'}") as writer:
            writer.write(sample(0))
            raise RuntimeError("stop")
    assert "its stream was cut off where it stood" in notes(info.value)
    assert writer.dest.stream is None


KILLED_WRITER = """
import sys
from tensorcom.shards import ShardWriter
sys.path.insert(0, sys.argv[3])
from test_writer_atomic import sample
with ShardWriter(sys.argv[1], maxcount=int(sys.argv[2])) as sink:
    for i in range(10**7):
        sink.write(sample(i, size=int(sys.argv[4])))
        if i == 0:
            print("writing", flush=True)
"""


def kill_while_writing(popen, pattern: str, delay: float) -> None:
    """Start a ShardWriter process on `pattern`, let it write for `delay` s after its first sample, SIGKILL it."""
    proc = popen.python("-c", KILLED_WRITER, pattern, str(KILL_PER_SHARD), os.path.dirname(__file__),
                        str(KILL_SIZE), stdout=subprocess.PIPE)
    ready, _, _ = select.select([proc.stdout], [], [], WAIT_S)
    assert ready and proc.stdout.readline() == b"writing\n"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=WAIT_S) == -signal.SIGKILL


@pytest.mark.procs
@pytest.mark.timeout(180)
def test_sigkill_never_leaves_a_partial_shard(popen, tmp_path):
    seed = random.randrange(10**6)
    rng = random.Random(seed)
    temps = 0
    for run in range(KILL_RUNS):
        directory = tmp_path / f"run{run}"
        directory.mkdir()
        suffix = ".tar" if run % 2 else ".tgz"
        kill_while_writing(popen, str(directory / f"w-%04d{suffix}"), rng.uniform(0.0, 0.4))
        names = sorted(os.listdir(directory))
        finals = [n for n in names if not n.startswith(".")]
        hidden = [n for n in names if n.startswith(".")]
        assert finals == [f"w-{n:04d}{suffix}" for n in range(len(finals))], (seed, names)
        assert all(fnmatch.fnmatch(n, f".w-*{suffix}.tmp-*") for n in hidden) and len(hidden) <= 1, (seed, names)
        for n, name in enumerate(finals):
            check_shard(str(directory / name), range(n * KILL_PER_SHARD, (n + 1) * KILL_PER_SHARD), KILL_SIZE)
        temps += len(hidden)
    assert temps > 0, f"no kill landed inside a shard (seed {seed})"


@pytest.mark.net
@pytest.mark.procs
@pytest.mark.timeout(120)
def test_s3_only_complete_objects(s3_server):
    client = s3_server.client()
    client.create_bucket(Bucket="atomic-test")
    with pytest.raises(RuntimeError):
        with TarWriter("s3://atomic-test/small.tar") as writer:  # buffered, never sent
            writer.write(sample(0))
            raise RuntimeError("stop")
    with pytest.raises(RuntimeError) as info:
        with TarWriter("s3://atomic-test/large.tar", default_block_size=5 << 20) as writer:
            for i in range(7):
                writer.write({"__key__": f"b{i}", "bin": os.urandom(1 << 20)})
            assert client.list_multipart_uploads(Bucket="atomic-test").get("Uploads")  # a part went out
            raise RuntimeError("stop")
    assert "abandoned shard s3://atomic-test/large.tar holding 7 samples" in notes(info.value)
    assert client.list_objects_v2(Bucket="atomic-test").get("Contents", []) == []
    assert client.list_multipart_uploads(Bucket="atomic-test").get("Uploads", []) == []
    with pytest.raises(RuntimeError):
        with ShardWriter("s3://atomic-test/s-%02d.tar", maxcount=2) as sink:
            for i in range(5):
                sink.write(sample(i))
            raise RuntimeError("stop")
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="atomic-test").get("Contents", [])]
    assert keys == ["s-00.tar", "s-01.tar"]
    check_shard("s3://atomic-test/s-01.tar", range(2, 4))
