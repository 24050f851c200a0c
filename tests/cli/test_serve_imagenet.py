"""serve-imagenet-dir, serve-imagenet-shards and `tensorcom serve` as real subprocesses feeding a real
receiving Connection on 127.0.0.1: shapes, dtypes, labels, epoch ends, -P, -B, -n, --shuffle/--no-shuffle,
options around the positionals, bad arguments. Options whose point is parsing, and arguments refused
before anything is served, are checked in this process."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from torchless import pillow_resize

from tensorcom import Connection

pytestmark = [pytest.mark.net, pytest.mark.procs]

CLASSES, PER_CLASS, SIZE = 3, 6, 32
BIN = Path(sys.executable).parent


def tool(name: str) -> list[str]:
    """The console script `name` of this environment, or the equivalent `python -m` command."""
    script = BIN / name
    if script.exists():
        return [str(script)]
    if name == "tensorcom":
        return [sys.executable, "-m", "tensorcom.cli.main"]
    return [sys.executable, "-m", "tensorcom.cli.serve_imagenet", name.rsplit("-", 1)[1]]


def jpeg(rng: np.random.Generator, label: int) -> bytes:
    """A small JPEG whose colour depends on its label."""
    import simplejpeg

    image = rng.integers(0, 60, (40, 48, 3), dtype=np.uint8)
    image[..., label] += 150
    return simplejpeg.encode_jpeg(image, quality=90)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """DIR/train/<class>/*.jpg with CLASSES classes of PER_CLASS images (0.1's layout)."""
    root = tmp_path_factory.mktemp("imagenet")
    rng = np.random.default_rng(0)
    for label in range(CLASSES):
        folder = root / "train" / f"class{label}"
        folder.mkdir(parents=True)
        for i in range(PER_CLASS):
            (folder / f"{i}.jpg").write_bytes(jpeg(rng, label))
    return root


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> str:
    """Two tar shards of jpg + cls samples; returns their brace pattern."""
    from tensorcom.shards import TarWriter

    root = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(1)
    for shard in range(2):
        with TarWriter(str(root / f"part-{shard}.tar")) as sink:
            for i in range(PER_CLASS * CLASSES // 2):
                label = i % CLASSES
                sink.write({"__key__": f"s{shard}-{i}", "jpg": jpeg(rng, label), "cls": str(label)})
    return str(root / "part-{0..1}.tar")


def receive(conn: Connection, epochs: int, proc: subprocess.Popen | None = None) -> list[list]:
    """The batches of `epochs` epochs, one list per epoch; on a failure, the server's stderr is shown."""
    try:
        return [[batch for batch in conn] for _ in range(epochs)]
    except Exception as exc:
        if proc is not None and proc.stderr is not None:
            proc.kill()
            raise AssertionError(f"receiving failed ({exc}); server stderr:\n{proc.stderr.read()}") from exc
        raise


def check_batches(batches: list, size: int = SIZE, dtype=np.uint8) -> np.ndarray:
    """Assert each batch is [images (N, size, size, 3) dtype, labels int32 in range]; all labels."""
    assert batches
    for images, labels in batches:
        assert images.dtype == dtype and images.shape[1:] == (size, size, 3)
        assert labels.dtype == np.int32 and labels.shape == images.shape[:1]
        assert 0 <= labels.min() and labels.max() < CLASSES
    return np.concatenate([labels for _, labels in batches])


def finish(proc: subprocess.Popen) -> None:
    """Assert the server ends by itself with status 0."""
    assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""


def test_dir_server_sends_augmented_epochs(tree, popen, free_port):
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        proc = popen.start([*tool("serve-imagenet-dir"), "-d", str(tree), "-b", "4", "--size", str(SIZE),
                            "--epochs", "2", "-r", "0", f"zpush://127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
        epochs = receive(conn, 2, proc)
    for batches in epochs:
        labels = check_batches(batches)
        assert sorted(labels) == sorted(list(range(CLASSES)) * PER_CLASS)  # every image once per epoch
        assert [len(b[1]) for b in batches] == [4, 4, 4, 4, 2]
    first = np.concatenate([images for images, _ in epochs[0]])
    second = np.concatenate([images for images, _ in epochs[1]])
    assert not np.array_equal(first, second)  # a new shuffle and new crops each epoch
    finish(proc)


def test_parallel_publishers_split_the_data(tree, popen, free_port):
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        proc = popen.start([*tool("serve-imagenet-dir"), "-d", str(tree / "train"), "-b", "5", "--size", "24",
                            "-P", "2", "-w", "1", "--epochs", "1", "-r", "0", f"zpush://127.0.0.1:{port}"],
                           stderr=subprocess.PIPE, text=True)
        (batches,) = receive(conn, 1, proc)
    labels = check_batches(batches, size=24)
    assert sorted(labels) == sorted(list(range(CLASSES)) * PER_CLASS)
    finish(proc)


def test_normalize_sends_float32(tree, popen, free_port):
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        proc = popen.start([*tool("serve-imagenet-dir"), "-d", str(tree), "-b", "6", "--size", "16", "-n", "--no-shuffle",
                            "--epochs", "1", "-r", "0", f"zpush://127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
        (batches,) = receive(conn, 1, proc)
    check_batches(batches, size=16, dtype=np.float32)
    images = np.concatenate([images for images, _ in batches])
    assert images.min() < -0.5 and images.max() > 1.0  # ImageNet mean/std normalization, not [0, 1]
    assert [list(labels) for _, labels in batches][0] == [0] * 6  # --no-shuffle: file order
    finish(proc)


def test_benchmark_mode_repeats_one_batch(tree, popen, free_port):
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        proc = popen.start([*tool("serve-imagenet-dir"), "-d", str(tree), "-b", "4", "--size", str(SIZE), "-B",
                            "--count", "7", "-r", "0", f"zpush://127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
        (batches,) = receive(conn, 1, proc)
    check_batches(batches)
    assert len(batches) == 7
    assert all(np.array_equal(b[0], batches[0][0]) and np.array_equal(b[1], batches[0][1]) for b in batches)
    finish(proc)


def test_default_pub_sub_with_benchmark(tree, popen, free_port):
    port = free_port()
    proc = popen.start([*tool("serve-imagenet-dir"), "-d", str(tree), "-b", "2", "--size", "16", "-B", "-r", "0",
                        f"zpub://127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
    with Connection(f"zsub://127.0.0.1:{port}", epoch=3, timeout=30) as conn:
        first = list(conn)  # joined mid-epoch: the pass ends at the epoch's marker or after 3 batches
        batches = first
        for _ in range(20):  # the server goes on: more passes, each to a marker or 3 batches
            batches = batches + list(conn)
    assert 1 <= len(first) <= 3  # joining at a marker never makes an empty first pass
    assert len(batches) > 3 * 3  # 20 passes of an endless stream: more than 3 of them were not empty
    check_batches(batches, size=16)
    assert proc.poll() is None  # still serving, forever by default


def test_shards_server(shards, popen, free_port):
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        proc = popen.start([*tool("serve-imagenet-shards"), "-u", shards, "-b", "4", "--size", "20", "--shuffle", "-P", "2",
                            "--epochs", "2", "-r", "0", f"zpush://127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
        epochs = receive(conn, 2, proc)
    total = np.concatenate([check_batches(batches, size=20) for batches in epochs])
    assert sorted(total) == sorted(list(range(CLASSES)) * PER_CLASS * 2)
    finish(proc)


@pytest.fixture
def http_base(shards):
    """An http.server on 127.0.0.1 (a thread here) serving the shard directory; yields its base URL."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(Path(shards).parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_shards_server_over_http(http_base, popen, free_port):
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        proc = popen.start([*tool("serve-imagenet-shards"), "-u", f"{http_base}/part-{{0..1}}.tar", "-b", "5",
                            "--size", "16", "-w", "2", "--epochs", "1", "-r", "0", f"zpush://127.0.0.1:{port}"],
                           stderr=subprocess.PIPE, text=True)
        (batches,) = receive(conn, 1, proc)
    assert sorted(check_batches(batches, size=16)) == sorted(list(range(CLASSES)) * PER_CLASS)
    finish(proc)


@pytest.mark.parametrize(
    "args",
    [
        ["-b", "0"],
        ["--size", "big"],
        ["-d", "/nonexistent/imagenet"],
        ["zpull://127.0.0.1:7999"],
        ["nonsense://127.0.0.1:7999"],
        ["-P", "2", "zpub://127.0.0.1:7999"],
        ["--no-such-option"],
    ],
)
def test_bad_arguments_exit_2_with_one_line(tree, capsys, args):
    from tensorcom.cli.serve_imagenet import main_dir

    refused = refusal(capsys, main_dir, args if "-d" in args else ["-d", str(tree), *args])
    assert "error" in refused


def refusal(capsys, main, argv: list[str]) -> str:
    """The one stderr line of `main(argv)` (a tool's entry point, run here), which must exit 2 before
    it starts a process."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert multiprocessing.active_children() == []
    return err


@pytest.mark.parametrize("name", ["serve-imagenet-dir", "serve-imagenet-shards"])
def test_old_dash_s_is_refused_with_the_flag_to_use(tree, capsys, name):
    # 0.1's -S meant --no-shuffle in one server and --shuffle in the other: neither guess is safe
    from tensorcom.cli.serve_imagenet import main_dir, main_shards

    main = main_dir if name.endswith("dir") else main_shards
    refused = refusal(capsys, main, [*(["-d", str(tree)] if name.endswith("dir") else ["-u", "x.tar"]), "-S"])
    assert "--shuffle" in refused and "--no-shuffle" in refused


@pytest.mark.parametrize("argv, shuffle", [([], True), (["--no-shuffle"], False), (["--shuffle"], True)])
def test_dir_shuffle_flags(argv, shuffle):
    from tensorcom.cli.serve_imagenet import dir_parser

    assert dir_parser().parse_args(argv).shuffle is shuffle


@pytest.mark.parametrize("argv, shuffle", [([], False), (["--shuffle"], True), (["--no-shuffle"], False)])
def test_shards_and_serve_shuffle_flags(argv, shuffle):
    from tensorcom.cli.serve import build_parser
    from tensorcom.cli.serve_imagenet import shards_parser

    assert shards_parser().parse_args(["-u", "x.tar", *argv]).shuffle is shuffle
    args = build_parser().parse_args(["m:f", *argv, "--shuffle-buffer", "7"])
    assert args.shuffle is shuffle and args.shuffle_buffer == 7


@pytest.mark.parametrize("argv", [["zpush://h:1", "-b", "3", "zpush://h:2"], ["-b", "3", "zpush://h:1", "zpush://h:2"],
                                  ["zpush://h:1", "zpush://h:2", "-b", "3"]])
def test_server_urls_around_options(argv):
    from tensorcom.cli.serve_imagenet import dir_parser, shards_parser

    for args in (dir_parser().parse_args(argv), shards_parser().parse_args(["-u", "x.tar", *argv])):
        assert args.urls == ["zpush://h:1", "zpush://h:2"] and args.batch_size == 3


def test_shards_needs_url():
    # the console script itself (the arguments refused above are refused in this process)
    result = subprocess.run(tool("serve-imagenet-shards"), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "-u" in result.stderr


USER_MODULE = '''
import numpy as np
import tensorcom

def batches():
    return [[np.full((2, 3), i, np.float32), np.array([i, i], np.int32)] for i in range(6)]

def pipeline():
    return tensorcom.Pipeline(range(12)).map(as_sample).batch(3)

def as_sample(i):
    return np.full(4, i, np.float32), np.int32(i)

def not_batches():
    return 42
'''


@pytest.fixture
def user_module(tmp_path) -> Path:
    (tmp_path / "usermod_h7.py").write_text(textwrap.dedent(USER_MODULE))
    return tmp_path


@pytest.mark.parametrize("function, workers, expected", [("batches", "1", [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]),
                                                         ("pipeline", "2", list(range(12)))])
def test_tensorcom_serve_user_function(user_module, popen, free_port, function, workers, expected):
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        proc = popen.start([*tool("tensorcom"), "serve", f"usermod_h7:{function}", f"zpush://127.0.0.1:{port}",
                            "-w", workers, "--epochs", "2", "-r", "0"], cwd=user_module, stderr=subprocess.PIPE, text=True)
        epochs = receive(conn, 2, proc)
    received = sorted(int(x) for batches in epochs for batch in batches for x in batch[1])
    assert received == sorted(expected * 2)
    finish(proc)


@pytest.mark.parametrize("order", ["factory -w URL", "-w factory URL", "factory URL -w"])
def test_tensorcom_serve_options_anywhere(order):
    # `tensorcom serve mod:fn -w 2 URL` was rejected: the URL came after an option (served with -w 2 above)
    from tensorcom.cli.serve import build_parser

    words = {"factory": ["usermod_h7:pipeline"], "-w": ["-w", "2"], "URL": ["zpush://127.0.0.1:9"]}
    args = build_parser().parse_args([word for part in order.split() for word in words[part]] + ["--epochs", "1"])
    assert (args.factory, args.urls, args.workers, args.epochs) == ("usermod_h7:pipeline", ["zpush://127.0.0.1:9"], 2, 1)


def test_tensorcom_serve_shuffle_and_count_runs_epochs_back_to_back(user_module, popen, free_port):
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        proc = popen.start([*tool("tensorcom"), "serve", "usermod_h7:batches", f"zpush://127.0.0.1:{port}", "--shuffle",
                            "--shuffle-buffer", "6", "--count", "9", "-r", "0"], cwd=user_module,
                           stderr=subprocess.PIPE, text=True)
        (batches,) = receive(conn, 1, proc)
    order = [int(batch[1][0]) for batch in batches]
    assert len(order) == 9  # 6 batches per epoch: one epoch and a half, then one end-of-epoch marker
    assert sorted(order[:6]) == list(range(6)) and order[:6] != list(range(6))  # epoch 0, shuffled
    assert len(set(order[6:])) == 3 and set(order[6:]) <= set(range(6))  # half of epoch 1
    finish(proc)


@pytest.mark.parametrize("factory", ["usermod_h7:missing", "usermod_h7", "no_such_module_h7:f"])
def test_tensorcom_serve_bad_factory(user_module, capsys, monkeypatch, factory):
    from tensorcom.cli.main import main

    monkeypatch.chdir(user_module)
    monkeypatch.setattr(sys, "path", list(sys.path))  # serve puts the current directory on it
    refused = refusal(capsys, main, ["serve", factory, "zpush://127.0.0.1:9", "--epochs", "1", "-r", "0"])
    assert factory.split(":")[0] in refused


def test_tensorcom_serve_factory_that_makes_no_batches(user_module, free_port):
    # found in the serving process: the console script exits 2 with one error line
    factory = "usermod_h7:not_batches"
    command = [*tool("tensorcom"), "serve", factory, f"zpush://127.0.0.1:{free_port()}", "--epochs", "1", "-r", "0"]
    result = subprocess.run(command, cwd=user_module, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "usermod_h7" in errors[0]


def digests(batches) -> list[str]:
    """One digest per batch of [images, labels], sorted: the batches as a multiset."""
    import hashlib

    return sorted(hashlib.sha1(images.tobytes() + labels.tobytes()).hexdigest() for images, labels in batches)


def test_resume_file_serves_exactly_the_batches_not_yet_consumed(tree, popen, free_port, tmp_path):
    """serve-imagenet-dir with 2 publishers, killed after the consumer took 3 of 10 batches; restarted
    with --resume FILE it sends the other 7: before + after is the uninterrupted epoch (its two
    portions, made here as the servers make them), no repeat."""
    import json
    import os
    import signal

    from tensorcom.images.imagenet import dir_pipeline

    def command(port, *more):
        return [*tool("serve-imagenet-dir"), "-d", str(tree / "train"), "-b", "2", "--size", "16", "-P", "2",
                "--seed", "5", "--epochs", "1", "-r", "0", *more, f"zpush://127.0.0.1:{port}"]

    with pillow_resize():  # as the servers resize images this small (images.imagenet.Augment)
        pipeline = dir_pipeline(str(tree / "train"), batch_size=2, size=16, seed=5)
        whole = [batch for portion in range(2) for batch in pipeline.shard(portion, 2)]
    assert sum(len(labels) for _, labels in whole) == CLASSES * PER_CLASS  # 2 portions of 9: 5 batches each

    port, state_path = free_port(), tmp_path / "feed.json"
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30, rcvhwm=1) as conn:
        proc = popen.start(command(port), stderr=subprocess.DEVNULL)
        before = [conn.recv() for _ in range(3)]
        conn.save_state(state_path)
        os.kill(proc.pid, signal.SIGKILL)  # its main process: its workers follow it
        proc.wait(timeout=10)

    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=30) as conn:
        conn.load_state_dict(json.loads(state_path.read_text()))
        proc = popen.start(command(port, "--resume", str(state_path)), stderr=subprocess.PIPE, text=True)
        (after,) = receive(conn, 1, proc)
    finish(proc)
    assert len(after) == len(whole) - 3
    assert digests(before + after) == digests(whole)
