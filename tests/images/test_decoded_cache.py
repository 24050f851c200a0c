"""Pipeline.cache (tensorcom.images.decoded_cache, tensorcom.pipeline.cache and _cache_store): decoded images stored once in
memory-mapped `.ten` files, read in later epochs; keys, the size bound, crash safety, exactness."""

from __future__ import annotations

import itertools
import os
import struct
import textwrap

import numpy as np
import pytest

from tensorcom import tenbin
from tensorcom.images.decoded_cache import DecodedCache, decode_bounded
from tensorcom.images.folder import ImageFolderSource
from tensorcom.images.imagenet import Augment, collate_pair
from tensorcom.pipeline import Pipeline
from tensorcom.pipeline._cache_index import KeyIndex, segment_ends
from tensorcom.pipeline._cache_store import (
    EntryStore,
    cut_stale_tails,
    digest,
    entry_buffers,
    entry_bytes,
)
from tensorcom.pipeline.cache import cache_directory

CLASSES, PER_CLASS = 2, 6


def write_tree(root, shape=(48, 64)):
    """root/c<label>/<i>.jpg: CLASSES x PER_CLASS JPEGs of `shape` (h, w) with random pixels."""
    import simplejpeg

    rng = np.random.default_rng(0)
    for label, i in itertools.product(range(CLASSES), range(PER_CLASS)):
        path = root / f"c{label}" / f"{i}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(simplejpeg.encode_jpeg(rng.integers(0, 255, (*shape, 3), dtype=np.uint8)))
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_tree(tmp_path_factory.mktemp("tree"))


def cached(tree, directory, **options):
    source = ImageFolderSource(str(tree), read=False, shuffle=True)
    return Pipeline(source, seed=3).cache(str(directory), **options)


def outcomes(pipeline):
    return [sample["__cache__"] for sample in pipeline]


def segments(directory) -> list:
    return sorted(path for path in directory.iterdir() if path.suffix == ".seg")


def test_store_round_trip_is_a_writable_view_of_its_segment(tmp_path):
    store = EntryStore(tmp_path)
    image = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    assert store.load("k") is None and not store.has("k") and len(store) == 0
    assert store.save("k", image) == "stored"
    assert [path.stat().st_size for path in segments(tmp_path)] == [entry_bytes(image)]
    buffers = entry_buffers(image)  # what save writes: tenbin's bytes, the pixels a view of the array
    assert b"".join(map(bytes, buffers)) == bytes(tenbin.encode_buffer([image]))
    assert any(np.shares_memory(np.frombuffer(buffer, np.uint8), image) for buffer in buffers if len(buffer))
    loaded = store.load("k")
    assert np.array_equal(loaded, image) and not loaded.flags.owndata and loaded.flags.writeable
    loaded[0, 0, 0] = 255  # copy-on-write: the file keeps its bytes
    assert store.load("k")[0, 0, 0] == 0 and EntryStore(tmp_path).load("k")[0, 0, 0] == 0


def test_a_record_that_does_not_check_out_is_a_miss_never_a_wrong_image(tmp_path):
    """Index records naming another key's entry, bytes past the segment's end, a segment that is not
    there, or with a wrong magic: each is a miss, and whole records after them still count."""
    store = EntryStore(tmp_path)
    store.save("k", np.full((6, 6, 3), 5, np.uint8))
    token = bytes.fromhex(segments(tmp_path)[0].name[:-4].rsplit(".", 1)[1])
    length = entry_bytes(np.zeros((6, 6, 3), np.uint8)) - 64
    bad = [(b"TcIndex1", digest("other"), token, 0, length), (b"TcIndex1", digest("past"), token, 64, length),
           (b"TcIndex1", digest("gone"), b"\0" * 8, 0, length), (b"TcIndeX1", digest("magic"), token, 0, length)]
    with open(tmp_path / "index.log", "ab") as index:
        index.write(b"".join(struct.pack("<8s20s8sqq12x", *record) for record in bad))
    store.save("after", np.full((6, 6, 3), 7, np.uint8))
    reader = EntryStore(tmp_path)
    assert [reader.load(key) for key in ("other", "past", "gone", "magic")] == [None] * 4
    assert int(reader.load("k").max()) == 5 and int(reader.load("after").max()) == 7


def test_the_index_keeps_the_latest_record_of_each_key_in_bulk_and_one_by_one():
    record = struct.Struct("<8s20s8sqq12x")
    shas = [digest(str(i)) for i in range(5000)]
    data = b"".join(record.pack(b"TcIndex1", sha, b"A" * 8, 64 * i, 10) for i, sha in enumerate(shas))
    data += record.pack(b"TcIndex1", shas[7], b"B" * 8, 0, 20)  # a later record of key 7 wins
    index = KeyIndex()
    index.add_records(data)  # the bulk path
    index.add_records(record.pack(b"TcIndex1", shas[9], b"B" * 8, 64, 30))  # one record
    for i in range(5000, 9200):  # one by one, across a merge
        index.add(digest(str(i)), b"C" * 8, i, 1)
    assert len(index) == 9200 and index.get(digest("nope")) is None
    assert index.get(shas[7]) == (b"B" * 8, 0, 20) and index.get(shas[9]) == (b"B" * 8, 64, 30)
    assert index.get(shas[4999]) == (b"A" * 8, 64 * 4999, 10) and index.get(digest("9199")) == (b"C" * 8, 9199, 1)
    assert segment_ends(data, 64) == {b"A" * 8: 64 * 4999 + 64 + 10, b"B" * 8: 64 + 20}


def test_first_epoch_stores_later_epochs_hit_the_same_pixels(tree, tmp_path):
    pipeline = cached(tree, tmp_path)
    first = list(pipeline)
    assert [s["__cache__"] for s in first] == ["stored"] * CLASSES * PER_CLASS
    again = list(cached(tree, tmp_path).set_epoch(1))
    assert {s["__cache__"] for s in again} == {"hit"}
    by_key = {s["__key__"]: s["jpg"] for s in first}
    for sample in again:
        assert np.array_equal(sample["jpg"], by_key[sample["__key__"]])
        assert sample["jpg"].shape == (48, 64, 3) and sample["cls"] in (0, 1)
    assert pipeline.steps[-1].args["fn"].counts == {"hit": 0, "stored": 12, "full": 0}


def test_max_side_uses_dct_scaling_and_is_its_own_key(tree, tmp_path):
    assert outcomes(cached(tree, tmp_path)) == ["stored"] * 12
    smaller = list(cached(tree, tmp_path, max_side=20))
    assert {s["__cache__"] for s in smaller} == {"stored"}  # another max_side: a miss, not the full images
    assert {s["jpg"].shape for s in smaller} == {(20, 27, 3)}  # decoded at 1/2 (24x32), resized
    assert {s["jpg"].shape for s in cached(tree, tmp_path, max_side=100)} == {(48, 64, 3)}
    assert decode_bounded((tree / "c0" / "0.jpg").read_bytes(), 6).shape == (6, 8, 3)


def test_max_side_resizes_with_torch_where_it_can_and_the_filter_is_part_of_the_key(tree):
    """The cache's resize is images.resample's (one implementation), reached from Pipeline.cache."""
    from tensorcom.images.resample import resize_box

    data = (tree / "c0" / "0.jpg").read_bytes()
    half = decode_bounded(data, 24)  # the 1/2-scale decode, not resized
    expected = resize_box(half, (0, 0, 32, 24), (27, 20), backend="torch")
    assert np.array_equal(decode_bounded(data, 20, "torch"), expected)
    source = ImageFolderSource(str(tree), read=False)
    assert cache_directory("c", source, 20, resize="torch") != cache_directory("c", source, 20, resize="pil")
    stage = cached(tree, "c", max_side=20).steps[-1].args["fn"]
    assert isinstance(stage, DecodedCache) and stage.resize == "torch"  # the images layer's stage; torch is here


def test_a_changed_file_is_a_miss_never_a_stale_image(tmp_path):
    root = write_tree(tmp_path / "data")
    assert outcomes(cached(root, tmp_path / "cache")) == ["stored"] * 12
    write_tree(root, shape=(32, 40))  # same paths, other pixels and sizes
    changed = list(cached(root, tmp_path / "cache"))
    assert {s["__cache__"] for s in changed} == {"stored"} and {s["jpg"].shape for s in changed} == {(32, 40, 3)}
    source = ImageFolderSource(str(root), read=False)
    assert cache_directory("c", source, None) != cache_directory("c", source, 64)
    assert cache_directory("c", source, None, key="v1") != cache_directory("c", source, None, key="v2")
    with pytest.raises(TypeError, match="key="):
        Pipeline([{"__key__": "a"}]).cache(str(tmp_path))


def test_max_bytes_bounds_the_files_and_the_rest_is_decoded(tree, tmp_path):
    one = entry_bytes(np.zeros((48, 64, 3), np.uint8))
    bounded = list(cached(tree, tmp_path, max_bytes=5 * one))
    assert [s["__cache__"] for s in bounded].count("stored") == 5
    assert [s["__cache__"] for s in bounded].count("full") == 7
    assert entries_of(tmp_path) == 5
    later = list(cached(tree, tmp_path, max_bytes=5 * one))  # the budget is shared through the directory
    assert sorted(s["__cache__"] for s in later) == ["full"] * 7 + ["hit"] * 5
    for before, after in zip(bounded, later):
        assert np.array_equal(before["jpg"], after["jpg"])


def augmented(tree, directory, workers=0, processes=True, **options):
    pipeline = cached(tree, directory, **options).map(Augment(16), rng=True).batch(4, collate=collate_pair)
    return pipeline.parallel(workers, processes=processes) if workers else pipeline


def test_the_same_seed_gives_the_same_batches_from_the_cache_or_not_stage(tree, tmp_path):
    """Cold (decode + store), warm (every image mapped from its file) and with nothing stored
    (max_bytes=0: every image decoded, as without a cache), on 2 threads: the same bits."""
    cold = list(augmented(tree, tmp_path, workers=2, processes=False))
    warm = list(augmented(tree, tmp_path, workers=2, processes=False))
    uncached = list(augmented(tree, tmp_path / "none", workers=2, processes=False, max_bytes=0))
    assert len(cold) == len(warm) == len(uncached) == 4  # each portion of 6 ends with a batch of 2
    for a, b, c in zip(cold, warm, uncached):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[0], c[0]) and np.array_equal(a[1], c[1])
    assert not entries_of(tmp_path / "none")
    hits = augmented(tree, tmp_path)
    assert sum(len(batch[1]) for batch in hits) == 12 and hits.steps[0].args["fn"].counts["hit"] == 12


KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    from tensorcom.pipeline import _cache_store
    store = _cache_store.EntryStore(sys.argv[1])
    store.save("whole", np.full((40, 50, 3), 7, np.uint8))
    def killed(fd, data):  # the entry is in the segment, its index record not yet appended
        os.kill(os.getpid(), signal.SIGKILL)
    _cache_store.os.write = killed
    store.save("torn", np.full((40, 50, 3), 9, np.uint8))
""")


def test_a_writer_killed_mid_write_leaves_no_entry_that_reads_as_valid(tmp_path, popen):
    proc = popen.python("-c", KILLED_WRITER, str(tmp_path))
    assert proc.wait(timeout=60) == -9
    store, one = EntryStore(tmp_path), entry_bytes(np.zeros((40, 50, 3), np.uint8))
    [dead] = segments(tmp_path)
    assert dead.stat().st_size == 2 * one  # the torn entry is there, no record points at it
    assert store.load("torn") is None and not store.has("torn") and len(store) == 1
    assert np.array_equal(store.load("whole"), np.full((40, 50, 3), 7, np.uint8))
    assert store.save("torn", np.full((40, 50, 3), 9, np.uint8)) == "stored"  # the next writer succeeds
    assert int(store.load("torn").max()) == 9
    assert cut_stale_tails(tmp_path) == 1  # the killed writer's tail is cut, this live one's kept
    assert dead.stat().st_size == one and [path.stat().st_size for path in segments(tmp_path)] == [one, one]
    assert int(EntryStore(tmp_path).load("whole").max()) == 7 and int(EntryStore(tmp_path).load("torn").max()) == 9


def test_entries_are_fsynced_only_when_durable(tmp_path, monkeypatch):
    """A kill cannot tear an indexed entry (test above); fsync only guards against a power loss: opt-in."""
    synced = []
    monkeypatch.setattr(os, "fsync", synced.append)
    assert EntryStore(tmp_path / "fast").save("k", np.zeros((4, 4, 3), np.uint8)) == "stored" and synced == []
    assert EntryStore(tmp_path / "durable", durable=True).save("k", np.zeros((4, 4, 3), np.uint8)) == "stored"
    assert len(synced) == 1 and int(EntryStore(tmp_path / "durable").load("k").sum()) == 0


def test_cache_rejects_bad_arguments_and_samples(tree, tmp_path):
    with pytest.raises(ValueError, match="max_side"):
        cached(tree, tmp_path, max_side=0)
    with pytest.raises(ValueError, match="max_bytes"):
        cached(tree, tmp_path, max_bytes=-1)
    with pytest.raises(KeyError, match="no image field"):
        list(Pipeline([{"__key__": "a", "txt": b"x"}]).cache(str(tmp_path), key="k"))
    with pytest.raises(TypeError, match="dict samples"):
        list(Pipeline([b"x"]).cache(str(tmp_path), key="k"))
    with pytest.raises(ValueError, match="tensorcom serve --cache DIR"):  # no directory, no server's
        list(Pipeline([{"__key__": "a", "jpg": (tree / "c0" / "0.jpg").read_bytes()}]).cache(None, key="k"))


def test_shards_are_keyed_by_url_and_key(tmp_path):
    """Two shards holding the same keys with other pixels: six entries, each its own image."""
    import simplejpeg

    from tensorcom.pipeline.sources import ShardSource
    from tensorcom.shards import TarWriter

    for shard in range(2):
        with TarWriter(str(tmp_path / f"s{shard}.tar")) as writer:
            for i in range(3):
                pixels = np.full((16, 24, 3), 40 * shard + 10 * i, np.uint8)
                writer.write({"__key__": f"k{i}", "jpg": simplejpeg.encode_jpeg(pixels), "cls": str(i)})
    urls = str(tmp_path / "s{0..1}.tar")
    first = list(Pipeline(ShardSource(urls)).cache(str(tmp_path / "cache")))
    again = list(Pipeline(ShardSource(urls)).cache(str(tmp_path / "cache")))
    assert [s["__cache__"] for s in first] == ["stored"] * 6 and [s["__cache__"] for s in again] == ["hit"] * 6
    assert len({int(s["jpg"].mean()) for s in again}) == 6
    for a, b in zip(first, again):
        assert np.array_equal(a["jpg"], b["jpg"]) and a["__key__"] == b["__key__"]


def test_two_writers_of_one_key_leave_a_reader_s_map_intact(tmp_path):
    """Writers of the same entry append without a lock: a map taken before keeps its own bytes, and a
    reader that comes later takes the latest record."""
    store = EntryStore(tmp_path)
    store.save("k", np.full((8, 8, 3), 1, np.uint8))
    before = store.load("k")
    assert EntryStore(tmp_path).save("k", np.full((8, 8, 3), 2, np.uint8)) == "stored"
    assert int(before.max()) == 1 and int(EntryStore(tmp_path).load("k").max()) == 2


def test_decoded_images_are_writable_whether_stored_or_not(tree):
    """torch.from_numpy wants writable arrays: a miss's resized image is one, as a hit's map is."""
    data = (tree / "c0" / "0.jpg").read_bytes()
    assert decode_bounded(data, 20).flags.writeable and decode_bounded(data, None).flags.writeable


def test_the_servers_pipeline_gives_the_same_bits_from_the_cache_or_not(tree, tmp_path):
    """dir_pipeline(cache=) with 2 worker processes, cold and warm, and inline with nothing stored give
    the same batches, with the labels (order) and random draws of the pipeline without a cache (whose
    batches do not depend on `workers`: the inline runs spare two process starts)."""
    from tensorcom.images.imagenet import dir_pipeline

    def run(workers=2, **cache):
        return list(dir_pipeline(str(tree), batch_size=4, size=16, workers=workers, seed=5, **cache))

    cold, warm = run(cache=str(tmp_path)), run(cache=str(tmp_path))
    unstored, plain = run(0, cache=str(tmp_path / "none"), cache_max_bytes=0), run(0)
    assert entries_of(tmp_path) == 12 and not entries_of(tmp_path / "none")
    assert len(cold) == len(warm) == len(unstored) == len(plain) >= 3
    for a, b, c, d in zip(cold, warm, unstored, plain):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[0], c[0]) and np.array_equal(a[1], d[1])


def entries_of(directory) -> int:
    """How many keys the caches under `directory` hold."""
    return sum(len(EntryStore(folder)) for folder, _, names in os.walk(directory) if "index.log" in names)
