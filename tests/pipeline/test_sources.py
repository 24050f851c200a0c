"""Sources: iterables, paths, HTTP fetches by a thread pool, ImageFolder trees, tar shards."""

import functools
import http.server
import threading

import pytest

from tensorcom.errors import WorkerError
from tensorcom.images import ImageFolderSource
from tensorcom.pipeline import Pipeline
from tensorcom.pipeline.sources import FetchSource, IterableSource, PathSource, ShardSource, epoch_portion, field_name


def portions(source, n, epoch=0, seed=0):
    return [list(source.iterate(seed=seed, epoch=epoch, worker=i, num_workers=n)) for i in range(n)]


def test_iterable_source_portions_and_epoch_shuffle():
    src = IterableSource(list(range(10)), shuffle=True)
    parts = portions(src, 3)
    assert sorted(sum(parts, [])) == list(range(10)) and [len(p) for p in parts] == [4, 3, 3]
    assert [src.length(i, 3) for i in range(3)] == [4, 3, 3]
    assert portions(src, 1, epoch=0) == portions(src, 1, epoch=0) != portions(src, 1, epoch=1)
    with pytest.raises(TypeError, match="sequence"):
        IterableSource(iter([1]), shuffle=True)


def test_epoch_portion_splits_one_permutation():
    items = list("abcdefg")
    parts = [list(epoch_portion(items, True, 1, 2, i, 3)) for i in range(3)]
    assert sorted(sum(parts, [])) == items and [len(p) for p in parts] == [3, 2, 2]
    assert parts == [list(epoch_portion(items, True, 1, 2, i, 3)) for i in range(3)]
    assert list(epoch_portion(items, False, 1, 2, 1, 3)) == ["b", "e"]


def test_the_old_portion_helpers_names_still_work():
    from tensorcom.pipeline import sources

    assert sources.epoch_share is sources.epoch_portion and sources.share_length is sources.portion_length
    assert sources.share_order is sources.portion_order


@pytest.fixture
def files(tmp_path):
    paths = []
    for i in range(6):
        path = tmp_path / f"f{i}.bin"
        path.write_bytes(bytes([i]) * (i + 1))
        paths.append(str(path))
    return paths


def test_path_source_reads_files(files):
    samples = list(Pipeline(PathSource(files)))
    assert [s["bin"] for s in samples] == [bytes([i]) * (i + 1) for i in range(6)]
    assert samples[2]["__key__"] == files[2] == samples[2]["__url__"]
    names = list(Pipeline(PathSource(files, read=False)))
    assert "bin" not in names[0] and len(Pipeline(PathSource(files))) == 6
    assert field_name("a/b.JPG") == "jpg" and field_name("a/noext") == "data"
    with pytest.raises(TypeError):
        PathSource("one-string")


@pytest.fixture
def http_root(tmp_path):
    for i in range(20):
        (tmp_path / f"img{i:02d}.jpg").write_bytes(b"JPEG" + bytes([i]) * 100)
    handler = functools.partial(QuietHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.mark.net
def test_fetch_source_downloads_with_threads(http_root):
    urls = [f"{http_root}/img{i:02d}.jpg" for i in range(20)]
    samples = list(Pipeline(FetchSource(urls, threads=4)))
    assert [s["jpg"] for s in samples] == [b"JPEG" + bytes([i]) * 100 for i in range(20)]
    unordered = list(Pipeline(FetchSource(urls, threads=4, ordered=False)).shard(1, 2))
    assert sorted(s["__key__"] for s in unordered) == urls[1::2]


@pytest.mark.net
def test_fetch_source_failure_names_the_url(http_root):
    with pytest.raises(WorkerError) as info:
        list(Pipeline(FetchSource([f"{http_root}/missing.jpg"], threads=2)))
    assert info.value.key.endswith("missing.jpg")


def test_image_folder_source(tmp_path):
    for label, name in enumerate(["cat", "dog"]):
        (tmp_path / name).mkdir()
        for i in range(3):
            (tmp_path / name / f"{i}.jpg").write_bytes(f"{name}{i}".encode())
    src = ImageFolderSource(str(tmp_path))
    samples = list(Pipeline(src))
    assert [(s["__key__"], s["cls"], s["jpg"]) for s in samples][:2] == [("cat/0", 0, b"cat0"), ("cat/1", 0, b"cat1")]
    assert len(Pipeline(src)) == 6 and len(Pipeline(src).shard(1, 4)) == 2
    shuffled = ImageFolderSource(str(tmp_path), shuffle=True, read=False)
    keys = [s["__key__"] for s in Pipeline(shuffled, seed=1)]
    assert sorted(keys) == sorted(s["__key__"] for s in samples) and "jpg" not in next(iter(Pipeline(shuffled)))


def test_shard_source_splits_whole_shards_between_workers(tmp_path):
    from tensorcom.shards import TarWriter

    for s in range(4):
        with TarWriter(str(tmp_path / f"part-{s}.tar")) as writer:
            for i in range(5):
                writer.write({"__key__": f"{s}-{i}", "txt": f"sample {s}-{i}", "cls": str(i)})
    src = ShardSource(str(tmp_path / "part-{0..3}.tar"))
    everything = [s["__key__"] for s in Pipeline(src)]
    assert len(everything) == 20 and everything[0] == "0-0" and Pipeline(src).length() is None
    parts = [[s["__key__"] for s in Pipeline(src).shard(i, 2)] for i in range(2)]
    assert sorted(parts[0] + parts[1]) == sorted(everything) and not set(parts[0]) & set(parts[1])
    assert {k.split("-")[0] for k in parts[0]}.isdisjoint({k.split("-")[0] for k in parts[1]})
    texts = list(Pipeline(ShardSource(str(tmp_path / "part-{0..3}.tar"), shuffle=True), seed=1).to_tuple("txt"))
    assert sorted(t[0] for t in texts) == sorted(f"sample {k}".encode() for k in everything)


def test_every_strided_split_picks_the_items_of_wire_strided():
    """Issue 17: sources, shard lists, a function's stream, Pipeline.shard and a Portion take the same items,
    those of the one split (tensorcom.wire.strided), for sequences and one-shot iterators alike."""
    from tensorcom import wire
    from tensorcom.pipeline.sources import portion_length, portion_order
    from tensorcom.pipeline.function_source import FunctionSource
    from tensorcom.shards.shardlist import split_shards

    items = [f"s{i}" for i in range(11)]
    for workers in (1, 3, 4):
        for worker in range(workers):
            expected = [items[i] for i in range(worker, len(items), workers)]
            assert wire.strided(items, worker, workers) == expected
            assert list(wire.strided(iter(items), worker, workers)) == expected
            assert wire.Portion("s", worker, workers).take(items) == expected
            assert [items[i] for i in portion_order(len(items), False, 0, 0, worker, workers)] == expected
            assert portion_length(len(items), worker, workers) == len(expected)
            assert split_shards(items, worker, workers) == expected
            assert list(FunctionSource("unused:spec", iter(items)).iterate(seed=0, epoch=0, worker=worker,
                                                                          num_workers=workers)) == expected
            assert list(IterableSource(iter(items)).iterate(seed=0, epoch=0, worker=worker,
                                                            num_workers=workers)) == expected
            assert list(Pipeline(items).shard(worker, workers)) == expected
    with pytest.raises(ValueError, match="worker 3 is not one of 3"):
        wire.strided(items, 3, 3)
