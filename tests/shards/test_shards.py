"""The shards facade: URL specs, shuffling, node/worker splits, epochs, resampling, len, resumption,
bad-data policies, decoding, and reading from HTTP, S3 and pipes."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from tensorcom import ShardDataset, shards
from tensorcom.errors import OpenError, SampleError, TarFormatError
from tensorcom.shards.shardlist import expand_urls

NSHARDS, PER_SHARD = 6, 5


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory):
    """6 shards of 5 samples: keys s{shard}-{i}, cls = 10*shard + i, a small PNG."""
    root = tmp_path_factory.mktemp("shards")
    image = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
    with shards.ShardWriter(str(root / "d-%06d.tar"), maxcount=PER_SHARD) as writer:
        for s, i in itertools.product(range(NSHARDS), range(PER_SHARD)):
            writer.write({"__key__": f"s{s}-{i}", "cls": 10 * s + i, "png": image, "txt": f"{s}/{i}"})
    return root


def spec(root) -> str:
    return f"{root}/d-{{000000..00000{NSHARDS - 1}}}.tar"


def keys(items) -> list[str]:
    return [s["__key__"] for s in items]


ALL_KEYS = [f"s{s}-{i}" for s in range(NSHARDS) for i in range(PER_SHARD)]


def test_url_specs(shard_dir):
    urls = expand_urls(spec(shard_dir))
    assert len(urls) == NSHARDS and urls[0].endswith("d-000000.tar")
    assert expand_urls(f"{shard_dir}/d-@000006.tar") == urls
    assert expand_urls(f"{urls[0]}::{shard_dir}/d-{{000001..000005}}.tar") == urls
    assert expand_urls([urls[0], f"{shard_dir}/d-{{000001..000005}}.tar"]) == urls
    with pytest.raises(ValueError):
        expand_urls("")
    with pytest.raises(TypeError):
        expand_urls(42)


def test_samples_in_order_and_shuffled(shard_dir):
    raw = list(shards.samples(spec(shard_dir)))
    assert keys(raw) == ALL_KEYS
    assert raw[0]["cls"] == b"0" and raw[0]["__url__"].endswith("d-000000.tar")
    first = keys(shards.samples(spec(shard_dir), shuffle=True, seed=1, epoch=2))
    again = keys(shards.samples(spec(shard_dir), shuffle=True, seed=1, epoch=2))
    other = keys(shards.samples(spec(shard_dir), shuffle=True, seed=1, epoch=3))
    assert first == again and sorted(first) == sorted(ALL_KEYS) and first != other


@pytest.mark.parametrize("world,workers", [(1, 1), (2, 1), (2, 3), (3, 2), (6, 1)])
def test_node_and_worker_split_covers_each_shard_once(shard_dir, world, workers):
    seen = []
    for rank, worker in itertools.product(range(world), range(workers)):
        seen += keys(shards.samples(spec(shard_dir), shuffle=True, seed=5, rank=rank, world_size=world,
                                    worker=worker, num_workers=workers))
    assert sorted(seen) == sorted(ALL_KEYS)


def test_an_empty_split_is_an_error_naming_rank_world_size_and_shard_count(shard_dir):
    urls = expand_urls(spec(shard_dir))[:4]
    with pytest.raises(ValueError, match=r"rank 5 of world size 8.* 4 shards"):
        shards.samples(urls, rank=5, world_size=8)  # at the call, not when iterated
    with pytest.raises(ValueError, match=r"rank 5 of world size 8.* 4 shards"):
        ShardDataset(urls, rank=5, world_size=8)
    with pytest.raises(ValueError, match=r"rank 1 of world size 2, worker 1 of 2 gets none of the 3 shards"):
        shards.samples(urls[:3], rank=1, world_size=2, worker=1, num_workers=2)


def test_shuffle_is_the_spelling_and_shuffle_shards_a_deprecated_alias(shard_dir):
    new = keys(ShardDataset(spec(shard_dir), shuffle=True, seed=3))
    with pytest.warns(DeprecationWarning, match="shuffle_shards= is deprecated, use shuffle="):
        old = keys(ShardDataset(spec(shard_dir), shuffle_shards=True, seed=3))
    assert new == old != ALL_KEYS
    with pytest.warns(DeprecationWarning):
        assert keys(shards.samples(spec(shard_dir), shuffle_shards=True, seed=3)) == keys(
            shards.samples(spec(shard_dir), shuffle=True, seed=3))
    with pytest.raises(TypeError, match="not both"):
        ShardDataset(spec(shard_dir), shuffle=True, shuffle_shards=True)


def test_a_misspelled_option_fails_when_built_and_says_did_you_mean(shard_dir):
    with pytest.raises(TypeError, match="'shuffle_bufer'.*did you mean 'shuffle_buffer'"):
        ShardDataset(spec(shard_dir), shuffle_bufer=10)
    with pytest.raises(TypeError, match="did you mean 'resampled'"):
        ShardDataset(spec(shard_dir), resample=True)
    with pytest.raises(TypeError, match="did you mean 'shuffle'"):
        shards.samples(spec(shard_dir), shufle=True)
    with pytest.raises(TypeError, match="did you mean 'require_end_blocks'"):
        shards.samples(spec(shard_dir), require_end_block=False)


def test_rank_from_environment(shard_dir, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    got = keys(shards.samples(spec(shard_dir)))
    assert got == [k for k in ALL_KEYS if int(k[1]) in (1, 4)]
    with pytest.raises(ValueError):
        list(shards.samples(spec(shard_dir), rank=3, world_size=3))


def test_dataset_epochs_decode_len_and_buffer(shard_dir):
    ds = ShardDataset(spec(shard_dir), epochs=2, sizes=PER_SHARD, decode="rgb8", shuffle=True,
                             shuffle_buffer=7, seed=3)
    assert len(ds) == 2 * NSHARDS * PER_SHARD
    got = list(ds)
    assert len(got) == len(ds)
    assert sorted(keys(got[:30])) == sorted(ALL_KEYS) and sorted(keys(got[30:])) == sorted(ALL_KEYS)
    assert keys(got[:30]) != ALL_KEYS  # mixed by the buffer
    assert got[0]["png"].shape == (8, 8, 3) and isinstance(got[0]["cls"], int)
    ds.set_epoch(0)
    assert keys(ds) == keys(got)  # same seed, same epochs → same order
    assert len(ShardDataset(spec(shard_dir), sizes=[1, 2, 3, 4, 5, 6], rank=1, world_size=2)) == 2 + 4 + 6
    with pytest.raises(TypeError):
        len(ShardDataset(spec(shard_dir)))
    with pytest.raises(ValueError):
        ShardDataset(spec(shard_dir), sizes=[1, 2])


def test_resampled_forever(shard_dir):
    ds = ShardDataset(spec(shard_dir), resampled=True, epochs=None, seed=9)
    got = keys(itertools.islice(iter(ds), 200))
    assert len(got) == 200 and set(got) <= set(ALL_KEYS)
    assert keys(itertools.islice(iter(ShardDataset(spec(shard_dir), resampled=True, epochs=None,
                                                          seed=9)), 200)) == got
    per_epoch = ShardDataset(spec(shard_dir), resampled=True, sizes=PER_SHARD)
    assert len(list(per_epoch)) == len(per_epoch) == NSHARDS * PER_SHARD


@pytest.mark.parametrize("buffer", [0, 6])
def test_resume_yields_exactly_the_unseen_samples(shard_dir, buffer):
    def make():
        return ShardDataset(spec(shard_dir), shuffle=True, shuffle_buffer=buffer, seed=4, epochs=2)

    full = keys(make())
    for stop in (1, 7, 13, 30, 41):
        ds = make()
        iterator = iter(ds)
        head = keys(itertools.islice(iterator, stop))
        state = ds.state_dict()
        resumed = make()
        resumed.load_state_dict(state)
        tail = keys(resumed)
        assert head + tail == full, stop  # the restarted run ends where the interrupted one would have
    with pytest.raises(ValueError):
        make().load_state_dict(dict(state, seed=99))


def write_corrupt(root, name, data: bytes) -> str:
    path = root / name
    path.write_bytes(data)
    return str(path)


def test_bad_shards_raise_or_are_counted(shard_dir, tmp_path):
    good = f"{shard_dir}/d-000000.tar"
    blob = open(f"{shard_dir}/d-000001.tar", "rb").read()
    truncated = write_corrupt(tmp_path, "t.tar", blob[:5000])  # s1-0 complete, s1-1 cut
    missing = str(tmp_path / "missing.tar")
    with pytest.raises(TarFormatError) as info:
        list(shards.samples([good, truncated]))
    assert info.value.url == truncated
    with pytest.raises(OpenError, match="missing.tar"):
        list(shards.samples([good, missing]))
    ds = ShardDataset([good, truncated, missing, good], handler=shards.ignore_and_continue)
    got = keys(ds)
    assert got == ALL_KEYS[:5] + ["s1-0"] + ALL_KEYS[:5]
    assert ds.skipped.as_dict() == {"samples": 0, "shards": 2}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counts = shards.SkipCounts()
        list(shards.samples([missing, good], handler=shards.warn_and_continue, counts=counts))
    assert counts.shards == 1 and "missing.tar" in str(caught[0].message)


def test_decode_errors_follow_the_handler(tmp_path):
    with shards.TarWriter(str(tmp_path / "bad.tar")) as writer:
        writer.write({"__key__": "a", "jpg": b"not a jpeg", "cls": 1})
        writer.write({"__key__": "b", "jpg": shards.encode_sample({"__key__": "x", "jpg": np.zeros((4, 4, 3),
                                                                                                  np.uint8)})["jpg"],
                      "cls": 2})
    with pytest.raises(SampleError, match="a.jpg"):
        list(ShardDataset(str(tmp_path / "bad.tar"), decode="rgb8"))
    ds = ShardDataset(str(tmp_path / "bad.tar"), decode="rgb8", handler=shards.ignore_and_continue)
    assert keys(ds) == ["b"] and ds.skipped.samples == 1


def test_to_tuple():
    sample = {"__key__": "k", "png": b"p", "cls": 3}
    assert shards.to_tuple(sample, "jpg;png", "cls") == (b"p", 3)
    assert shards.to_tuple(sample, "jpg;png cls") == (b"p", 3)
    with pytest.raises(SampleError, match="txt"):
        shards.to_tuple(sample, "txt")
    assert shards.find_field(sample, "JPG;PNG") == ("png", b"p") and shards.find_field(sample, "txt") is None
    assert shards.pick_field(sample, "__key__") == "k"


@pytest.mark.net
def test_read_over_http(shard_dir, http_server):
    for name in ("d-000000.tar", "d-000001.tar"):
        (http_server.root / name).write_bytes((shard_dir / name).read_bytes())
    got = list(shards.samples(f"{http_server.url}/d-{{000000..000001}}.tar"))
    assert keys(got) == ALL_KEYS[:10] and got[0]["__url__"] == f"{http_server.url}/d-000000.tar"
    with pytest.raises(OpenError, match="404"):
        list(shards.samples(f"{http_server.url}/nope.tar"))
    counts = shards.SkipCounts()
    urls = [f"{http_server.url}/status/500/x.tar", f"{http_server.url}/d-000000.tar"]
    assert len(list(shards.samples(urls, handler=shards.ignore_and_continue, counts=counts, retries=0))) == 5
    assert counts.shards == 1


@pytest.mark.net
@pytest.mark.procs
def test_read_from_s3(shard_dir, s3_server):
    client = s3_server.client()
    client.create_bucket(Bucket="shards-test")
    for s in range(NSHARDS):
        name = f"d-{s:06d}.tar"
        client.put_object(Bucket="shards-test", Key=f"ds/{name}", Body=(shard_dir / name).read_bytes())
    assert keys(shards.samples("s3://shards-test/ds/d-@000006.tar")) == ALL_KEYS
    with shards.ShardWriter("s3://shards-test/out/o-%03d.tar.gz", maxcount=10) as writer:
        for sample in shards.samples(spec(shard_dir)):
            writer.write(sample)
    assert keys(shards.samples(writer.shards)) == ALL_KEYS
    with pytest.raises(OpenError, match="s3://shards-test/ds/none.tar"):
        list(shards.samples("s3://shards-test/ds/none.tar"))


def test_read_from_pipe(shard_dir):
    got = keys(shards.samples(f"pipe:cat {shard_dir}/d-000002.tar"))
    assert got == ALL_KEYS[10:15]
    with pytest.raises(OpenError, match="status 1"):
        list(shards.samples(f"pipe:cat {shard_dir}/nonexistent.tar 2>/dev/null"))


@pytest.mark.procs
@pytest.mark.isolated  # the DataLoader forks: not after threads other tests started here
def test_torch_dataloader_workers_share_the_shards(shard_dir):
    torch_data = pytest.importorskip("torch.utils.data")
    from tensorcom.adapters.torch import iterable_dataset

    dataset = iterable_dataset(ShardDataset(spec(shard_dir), shuffle=True, seed=2, rank=0, world_size=1))
    loader = torch_data.DataLoader(dataset, batch_size=None, num_workers=2, timeout=60,
                                   collate_fn=lambda sample: sample["__key__"])
    got = list(loader)
    assert sorted(got) == sorted(ALL_KEYS)
