"""tensorcom.shards.convert and tensorcom.pipeline.shard_writing: the plan (pure) and conversions of small
image folders, generated samples, Parquet tables and saved Hugging Face datasets, read back by our
reader, Python's tarfile, GNU tar and WebDataset; -j 1 and -j 2 alike; resume and its refusal."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import tarfile

import numpy as np
import pytest

from tensorcom import shards
from tensorcom.errors import WorkerDied, WorkerError
from tensorcom.pipeline.shard_writing import Claims, convert, run_claimed
from tensorcom.shards import TarWriter
from tensorcom.shards.convert import FilesInput, IterableInput, Shard, manifest_path, plan_shards, runs

CLASSES, PER_CLASS = ("bird", "cat", "dog"), 7


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An image folder of 21 files of random bytes (one .png among the .jpg), with `expected`:
    {key: (bytes, class index)}."""
    root = tmp_path_factory.mktemp("folder")
    rng = np.random.default_rng(0)
    expected = {}
    for label, name in enumerate(CLASSES):
        (root / name).mkdir()
        for i in range(PER_CLASS):
            ext = "png" if (label, i) == (1, 3) else "jpg"
            data = rng.bytes(int(rng.integers(10, 3000)))
            (root / name / f"{i:03d}.{ext}").write_bytes(data)
            expected[f"{name}/{i:03d}"] = (ext, data, label)
    return root, expected


def folder_input(root) -> FilesInput:
    files = sorted((str(p), CLASSES.index(p.parent.name)) for p in root.glob("*/*") if p.is_file())
    return FilesInput(files, str(root))


def shard_paths(directory, ext="tar") -> list[str]:
    return sorted(str(p) for p in directory.glob(f"*.{ext}"))


def test_plan_cuts_by_count_then_by_size():
    assert plan_shards(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert plan_shards(0, 4) == []
    assert plan_shards(6, 10, sizes=[5, 5, 5, 20, 1, 1], maxsize=12) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert plan_shards(3, 2, sizes=[50, 1, 1], maxsize=10) == [(0, 1), (1, 3)]  # an oversized sample alone
    with pytest.raises(ValueError, match="maxcount"):
        plan_shards(3, 0)


def test_runs_one_shard_each_or_contiguous_runs_for_sequential_inputs():
    shards_ = [Shard(n, f"s{n}", 3 * n, 3 * n + 3) for n in range(7)]
    assert runs(shards_, 2, sequential=False) == [[s] for s in shards_]
    split = runs(shards_, 3, sequential=True)
    assert [s for run in split for s in run] == shards_ and len(split) == 3
    assert manifest_path("out/train-%06d.tar") == os.path.join("out", "train.manifest.json")
    assert manifest_path("%04d.tar") == "shards.manifest.json"


def read_back_everywhere(paths: list[str]) -> dict[str, dict[str, bytes]]:
    """{key: {field: bytes}} as our reader reads `paths`, checked equal to what tarfile, GNU tar and
    WebDataset read; every key once."""
    ours = [dict(s) for s in shards.samples(paths)]
    keys = [s["__key__"] for s in ours]
    assert len(keys) == len(set(keys))
    found = {s["__key__"]: {k: v for k, v in s.items() if not k.startswith("__")} for s in ours}
    members = []
    for path in paths:
        with tarfile.open(path) as archive:
            members += [(m.name, archive.extractfile(m).read()) for m in archive.getmembers()]
        listed = subprocess.run(["tar", "-tf", path], capture_output=True, text=True, timeout=30, check=True)
        assert listed.stdout.split() == [name for name, _ in members[-len(listed.stdout.split()):]]
    assert sorted(members) == sorted((f"{k}.{f}", v) for k, fields in found.items() for f, v in fields.items())
    import webdataset as wds

    theirs = {s["__key__"]: s for s in wds.WebDataset(paths, shardshuffle=False, empty_check=False)}
    assert {k: {f: theirs[k][f] for f in fields} for k, fields in found.items()} == found
    return found


class HandshakeInput(FilesInput):
    """A FilesInput whose first read in this (the test's) process waits until a helper process has
    started reading a shard too, so that with processes=2 both write shards. The helper connects to the
    Unix socket `address` that the test listens on."""

    def __init__(self, files, root, address: str):
        super().__init__(files, root)
        self.address, self.parent, self.listener = address, os.getpid(), None

    def __getstate__(self):
        return {**self.__dict__, "listener": None}

    def read(self, start, stop):
        if os.getpid() != self.parent:
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(self.address)
        elif self.listener is not None:
            self.listener.settimeout(60)
            self.listener.accept()[0].close()  # socket.timeout after 60 s fails the test
            self.listener = None
        return super().read(start, stop)


@pytest.mark.procs
@pytest.mark.net
def test_image_folder_to_tar_shards_the_same_for_one_and_two_processes(folder, tmp_path, ipc_path):
    root, expected = folder
    one = convert(folder_input(root), str(tmp_path / "one" / "train-%06d.tar"), maxcount=4, processes=1)
    plain = folder_input(root)
    handshake = HandshakeInput(plain.files, plain.root, ipc_path())
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(handshake.address)
        listener.listen(16)
        handshake.listener = listener
        two = convert(handshake, str(tmp_path / "two" / "train-%06d.tar"), maxcount=4, processes=2)
        assert handshake.listener is None  # a helper wrote shards
    assert [s.count for s in one.shards] == [4, 4, 4, 4, 4, 1] and one.shards == two.shards
    paths_one, paths_two = shard_paths(tmp_path / "one"), shard_paths(tmp_path / "two")
    assert [os.path.basename(p) for p in paths_one] == [os.path.basename(p) for p in paths_two]
    for a, b in zip(paths_one, paths_two):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read()
    found = read_back_everywhere(paths_one)
    assert found == {key: {ext: data, "cls": str(label).encode()} for key, (ext, data, label) in expected.items()}
    assert not [p for p in os.listdir(tmp_path / "one") if p.startswith(".")]  # no temporary file left


def test_resume_keeps_finished_shards_and_rewrites_the_rest(folder, tmp_path):
    root, expected = folder
    pattern = str(tmp_path / "train-%04d.tar")
    convert(folder_input(root), pattern, maxcount=5)
    paths = shard_paths(tmp_path)
    os.remove(paths[1])
    with open(paths[2], "r+b") as stream:  # a finished name with the wrong count (one sample less)
        stream.truncate(0)
        with TarWriter(stream) as writer:
            writer.write({"__key__": "other", "txt": "x"})
    with open(paths[4], "r+b") as stream:  # a finished name cut short (its data and end blocks)
        stream.truncate(1000)
    leftover = tmp_path / f".{os.path.basename(paths[3])}.tmp-1-abcd"
    leftover.write_bytes(b"partial")
    before = {p: os.stat(p) for p in (paths[0], paths[3])}
    manifest = convert(folder_input(root), pattern, maxcount=5, resume=True)
    assert manifest.kept == [os.path.basename(p) for p in (paths[0], paths[3])]
    for path, st in before.items():
        assert (os.stat(path).st_ino, os.stat(path).st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert not leftover.exists()
    assert sorted(s["__key__"] for s in shards.samples(shard_paths(tmp_path))) == sorted(expected)


def test_resume_against_a_changed_input_or_options_is_refused(folder, tmp_path):
    root, _ = folder
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    pattern = str(tmp_path / "out" / "s-%04d.tar")
    convert(folder_input(copy), pattern, maxcount=5)
    with pytest.raises(ValueError, match="maxcount was 5, now 6"):
        convert(folder_input(copy), pattern, maxcount=6, resume=True)
    with open(copy / "cat" / "002.jpg", "ab") as stream:
        stream.write(b"more")
    with pytest.raises(ValueError, match="input changed"):
        convert(folder_input(copy), pattern, maxcount=5, resume=True)
    with open(manifest_path(pattern)) as stream:
        assert json.load(stream)["maxcount"] == 5  # the refused resume wrote nothing


def test_a_file_gone_since_the_listing_is_an_open_error_naming_it(folder, tmp_path):
    from tensorcom.errors import OpenError

    root, _ = folder
    files = folder_input(root).files + [(str(tmp_path / "gone.jpg"), 0)]
    with pytest.raises(OpenError, match="gone.jpg"):
        convert(FilesInput(files, str(root)), str(tmp_path / "out" / "s-%02d.tar"), maxcount=5)
    source = FilesInput(files, str(root))
    source.fingerprint = lambda: "x"  # planned without stat: the read names the file
    with pytest.raises(OpenError, match="gone.jpg"):
        convert(source, str(tmp_path / "out" / "s-%02d.tar"), maxcount=5)
    assert sorted(os.listdir(tmp_path / "out")) == ["s-00.tar", "s-01.tar", "s-02.tar", "s-03.tar", "s.manifest.json"]


def generated():
    """Samples of every kind of value, some without a key."""
    for i in range(9):
        sample = {"txt": f"text {i}", "cls": i % 2, "npy": np.arange(i)}
        yield sample if i % 3 else {"__key__": f"g{i}", **sample}


def test_iterable_input_values_encoded_by_extension_and_keys_by_index(tmp_path):
    source = IterableInput(generated, name="generated")
    manifest = convert(source, str(tmp_path / "g-%03d.tar"), maxcount=100, maxsize=3000)
    assert len(manifest.shards) > 1 and sum(s.count for s in manifest.shards) == 9
    samples = {s["__key__"]: s for s in shards.samples(shard_paths(tmp_path))}
    assert sorted(samples) == sorted(["g0", "000000001", "000000002", "g3", "000000004", "000000005", "g6",
                                      "000000007", "000000008"])
    decoded = shards.decode_sample(samples["000000005"])
    assert decoded["txt"] == "text 5" and decoded["cls"] == 1 and list(decoded["npy"]) == list(range(5))


def test_parquet_table_to_tar_and_to_parquet_shards(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from tensorcom.shards.convert_tables import TableInput

    table = pa.table({"image": [{"bytes": b"\xff\xd8\xff" + bytes([i]), "path": None} for i in range(10)],
                      "label": list(range(10)), "caption": [f"c{i}" if i != 4 else None for i in range(10)]})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=3)
    convert(TableInput(str(tmp_path / "t.parquet")), str(tmp_path / "tar" / "p-%02d.tar"), maxcount=4)
    samples = list(shards.samples(shard_paths(tmp_path / "tar")))
    assert [s["__key__"] for s in samples] == [f"{i:09d}" for i in range(10)]
    assert samples[7]["image.jpg"] == b"\xff\xd8\xff\x07" and samples[7]["label"] == b"7"
    assert "caption" not in samples[4] and samples[5]["caption"] == b"c5"
    convert(TableInput(str(tmp_path / "t.parquet")), str(tmp_path / "pq" / "p-%02d.parquet"), maxcount=4,
            format="parquet")
    rows = [r for p in shard_paths(tmp_path / "pq", "parquet") for r in pq.read_table(p).to_pylist()]
    assert [r["__key__"] for r in rows] == [s["__key__"] for s in samples]
    assert rows[7]["image.jpg"] == b"\xff\xd8\xff\x07" and rows[4]["caption"] is None
    arrow = tmp_path / "t.arrow"
    with pa.ipc.new_file(str(arrow), table.schema) as sink:
        for batch in table.to_batches(max_chunksize=4):
            sink.write_batch(batch)
    convert(TableInput(str(arrow)), str(tmp_path / "ipc" / "a-%02d.tar"), maxcount=3)
    from_arrow = list(shards.samples(shard_paths(tmp_path / "ipc")))
    assert [{**s, "__url__": ""} for s in from_arrow] == [{**s, "__url__": ""} for s in samples]


def test_saved_hugging_face_dataset_keeps_image_bytes(tmp_path):
    datasets = pytest.importorskip("datasets")
    from tensorcom.shards.convert_tables import HuggingFaceInput

    from PIL import Image

    pngs = []
    for i in range(6):
        buffer = io.BytesIO()
        Image.new("RGB", (4, 4), (i * 40, 0, 0)).save(buffer, format="PNG")
        pngs.append(buffer.getvalue())
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    data = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in pngs], "label": list(range(6))},
                                      features=features)
    datasets.DatasetDict({"train": data}).save_to_disk(str(tmp_path / "hf"))
    convert(HuggingFaceInput(str(tmp_path / "hf")), str(tmp_path / "out" / "h-%02d.tar"), maxcount=4)
    samples = list(shards.samples(shard_paths(tmp_path / "out")))
    assert [s["image.png"] for s in samples] == pngs  # the original bytes, not re-encoded
    assert [int(s["label"]) for s in samples] == list(range(6))


def test_claims_share_one_counter_each_task_once():
    import multiprocessing

    counter = multiprocessing.get_context("spawn").Value("q", 0)
    first, second = (Claims(str.upper, counter)(["a", "b", "c"]) for _ in range(2))
    assert [next(first), next(second), next(first)] == ["A", "B", "C"]
    assert list(second) == [] and list(first) == [] and counter.value == 5  # each asked once more


LISTENER: list[socket.socket] = []  # the test's listening socket, for the work done in the test's process


def fail_in_helper(task: tuple[str, int, str]) -> int:
    """In the test's process: wait until a helper connected. In a helper: connect, then fail as `how` says."""
    address, parent, how = task
    if os.getpid() == parent:
        if LISTENER:
            LISTENER.pop().accept()[0].close()
        return 0
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(address)
    if how == "die":
        os.kill(os.getpid(), 9)
    raise KeyError("helper says no")


@pytest.mark.procs
@pytest.mark.net
@pytest.mark.parametrize("how, error, words", [("raise", WorkerError, "helper says no"),
                                               ("die", WorkerDied, "shard writer process 0 .* killed by signal 9")])
def test_a_helper_that_fails_or_dies_is_an_error_and_no_helper_is_left(ipc_path, how, error, words):
    import multiprocessing

    address = ipc_path()
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(address)
        listener.listen(8)
        listener.settimeout(60)
        LISTENER.append(listener)
        with pytest.raises(error, match=words):
            run_claimed(fail_in_helper, [(address, os.getpid(), how)] * 4, 2)
    assert multiprocessing.active_children() == []
