"""Exact resume: the samples before a checkpoint plus those after a restart from it are one epoch,
with no duplicate and nothing missing — in-process, with thread and process workers, and under
torchdata's StatefulDataLoader with 0 and 2 (forked) workers (a mixed Pipeline under 2: test_mix_workers).
Plus the DataLoader double split.
What worker processes run comes from worker_functions, which imports nothing."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from tensorcom import shards
from tensorcom.adapters.torch import iterable_dataset
from tensorcom.pipeline import Pipeline, ShardDataset, ShardSource
from worker_functions import key_of, keys_of_batch, noisy, unchanged  # tests/pipeline/worker_functions.py

NSHARDS, PER_SHARD = 8, 25
ALL = [f"s{s}-{i:02d}" for s in range(NSHARDS) for i in range(PER_SHARD)]


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    with shards.ShardWriter(str(root / "d-%02d.tar"), maxcount=PER_SHARD) as writer:
        for key in ALL:
            writer.write({"__key__": key, "cls": int(key[1]), "txt": key})
    return f"{root}/d-{{00..{NSHARDS - 1:02d}}}.tar"


def flat(batches):
    return [k for b in batches for k in keys_of_batch(b)]


def resumed(make, stop, flatten=flat):
    """(before, after): `stop` items of make(), then all of a fresh make() loaded with the state."""
    first = make()
    iterator = iter(first)
    before = list(itertools.islice(iterator, stop))
    state = json.loads(json.dumps(first.state_dict()))
    second = make()
    second.load_state_dict(state)
    return flatten(before), flatten(list(second))


# processes=False: the same pipeline with threads (or inline), whose order the process pipeline must match
PIPELINES = {
    "in-process": lambda urls, processes=False: Pipeline(ShardSource(urls, shuffle=True), seed=3).shuffle(20)
    .map(noisy, rng=True).batch(7),
    "thread map": lambda urls, processes=False: Pipeline(ShardSource(urls), seed=3).shuffle(9)
    .map(noisy, rng=True, workers=3).batch(5),
    "process map": lambda urls, processes=True: Pipeline(ShardSource(urls), seed=3)
    .map(noisy, rng=True, workers=2, processes=processes).batch(6),
    "thread parallel": lambda urls, processes=False: Pipeline(ShardSource(urls), seed=3).shuffle(9).batch(4)
    .parallel(3, processes=False),
    "process parallel": lambda urls, processes=True: Pipeline(ShardSource(urls), seed=3).shuffle(9).batch(4)
    .parallel(2, processes=processes).prefetch(2),
}


def checkpointed(pipeline, stops):
    """One pass of `pipeline` whose state is saved after each of `stops` items: (its items, {stop: state})."""
    items, states = [], {}
    for item in pipeline:
        items.append(item)
        if len(items) in stops:
            states[len(items)] = json.loads(json.dumps(pipeline.state_dict()))
    return items, states


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pipeline_resume_is_exact(urls, name):
    """One pass saves its state after 1, 4 and 13 batches (and is the same pass as one that saves
    nothing, with threads in place of processes); a fresh pipeline loaded with each state yields the rest."""
    make = lambda **kw: PIPELINES[name](urls, **kw)
    with make() as first:  # closed at once: a pipeline's worker processes outlive a pass
        items, states = checkpointed(first, (1, 4, 13))
    full = flat(items)
    assert sorted(full) == sorted(ALL) and full == flat(make(processes=False))
    assert sorted(states) == [1, 4, 13]
    for stop, state in states.items():
        with make() as second:
            second.load_state_dict(state)
            assert flat(items[:stop]) + flat(second) == full, stop


@pytest.mark.parametrize("options", [dict(shuffle=True, shuffle_buffer=15), dict(resampled=True, epochs=2),
                                     dict(decode=lambda s: {**s, "n": len(s["txt"])}, shuffle_buffer=4, epochs=2)])
def test_shard_dataset_resume_is_exact(urls, options):
    make = lambda: ShardDataset(urls, seed=4, **options)
    full = [key_of(s) for s in make()]
    for stop in (1, 9, 26, 130):
        before, after = resumed(make, stop, lambda samples: [key_of(s) for s in samples])
        assert before + after == full, stop


def test_shard_dataset_and_pipeline_share_one_shuffle_buffer(urls):
    via_dataset = [key_of(s) for s in ShardDataset(urls, shuffle=True, shuffle_buffer=11, seed=6)]
    via_pipeline = [key_of(s) for s in Pipeline(ShardSource(urls, shuffle=True), seed=6).shuffle(11)]
    assert via_dataset == via_pipeline and sorted(via_dataset) == sorted(ALL) and via_dataset != ALL


def test_a_misspelled_pipeline_option_fails_when_built():
    with pytest.raises(TypeError, match="'wokers'.*did you mean 'workers'"):
        Pipeline(range(3)).map(key_of, wokers=2)
    with pytest.raises(TypeError, match="did you mean 'partial'"):
        Pipeline(range(3)).batch(2, partal=False)


@pytest.mark.procs
@pytest.mark.timeout(180)
def test_a_dataloader_over_a_pipeline_of_a_shard_dataset_yields_every_sample_once(tmp_path):
    """Regression: ShardDataset split by DataLoader worker and Pipeline split again (100 of 200); spawned
    workers take disjoint portions that cover everything (forked ones: test_pipeline). Then the
    pipeline's own state_dict() warns: a plain DataLoader's workers hold the position."""
    import warnings

    torch_data = pytest.importorskip("torch.utils.data")
    with shards.ShardWriter(str(tmp_path / "u-%02d.tar"), maxcount=10) as writer:
        for i in range(200):
            writer.write({"__key__": f"{i:04d}", "cls": i})
    p = Pipeline(ShardDataset(f"{tmp_path}/u-{{00..19}}.tar")).batch(10)
    dataset = iterable_dataset(p)
    assert isinstance(dataset, torch_data.IterableDataset)
    loader = torch_data.DataLoader(dataset, batch_size=None, num_workers=2, timeout=60,
                                   multiprocessing_context="spawn", collate_fn=keys_of_batch)
    got = [k for batch in loader for k in batch]
    assert len(got) == 200 and sorted(got) == [f"{i:04d}" for i in range(200)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = p.state_dict()
    assert state["chain"] is None
    assert any("StatefulDataLoader" in str(w.message) for w in caught)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Pipeline(range(3)).state_dict()
    assert not caught


def stateful_loader(dataset, workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    options = dict(multiprocessing_context="fork", timeout=60) if workers else {}
    return StatefulDataLoader(dataset, batch_size=None, num_workers=workers, collate_fn=unchanged, **options)


DATASETS = {
    "ShardDataset": lambda urls: iterable_dataset(ShardDataset(urls, shuffle=True, shuffle_buffer=10, seed=2)),
    "Pipeline": lambda urls: iterable_dataset(Pipeline(ShardSource(urls, shuffle=True), seed=2).shuffle(10)
                                              .map(noisy, rng=True)),
}


@pytest.mark.procs
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", sorted(DATASETS))
def test_stateful_dataloader_resumes_exactly(urls, kind, caplog):
    """In-process; under 2 workers: test_forked_dataloader_workers."""
    stateful_resume(urls, kind, 0, caplog)


@pytest.mark.procs
@pytest.mark.timeout(300)
@pytest.mark.isolated
def test_forked_dataloader_workers(urls, caplog):
    """What forks torch DataLoader workers, in one interpreter of its own (a fork must not inherit other
    tests' threads; forked workers inherit torch where spawned ones import it again, ~1.6 s of CPU
    each): StatefulDataLoader resumes under 2 workers, of a ShardDataset (each worker its portion) and
    of a mixed Pipeline (test_mix_workers), and a plain DataLoader's workers taking disjoint portions
    (test_pipeline). Spawned workers: the double-split regression above."""
    from test_mix_workers import check_a_mixture_resumes_under_two_forked_workers
    from test_pipeline import check_forked_dataloader_workers_take_disjoint_portions

    stateful_resume(urls, "ShardDataset", 2, caplog)
    check_a_mixture_resumes_under_two_forked_workers(caplog)
    check_forked_dataloader_workers_take_disjoint_portions()


def stateful_resume(urls, kind, workers, caplog):
    """A StatefulDataLoader of DATASETS[kind] with `workers` (forked) workers, saved after 10 samples;
    a fresh one loaded with that state yields the rest: every sample once, from our saved state."""
    pytest.importorskip("torchdata.stateful_dataloader")
    first = stateful_loader(DATASETS[kind](urls), workers)
    iterator = iter(first)
    before = [key_of(next(iterator)) for _ in range(10)]
    state = first.state_dict()
    assert len(pipeline_states(state)) == max(workers, 1)  # each worker's position, saved by us
    del iterator
    second = stateful_loader(DATASETS[kind](urls), workers)
    second.load_state_dict(state)
    after = [key_of(s) for s in second]
    assert len(before + after) == len(ALL) and sorted(before + after) == sorted(ALL)
    if workers == 0:
        assert before + after == [key_of(s) for s in stateful_loader(DATASETS[kind](urls), 0)]
    assert np.unique(before + after).size == len(ALL)
    assert "naively fast-forwarding" not in caplog.text  # restored from our state, not by replaying


def pipeline_states(state):
    """The Pipeline states (dicts with a "chain") anywhere inside a StatefulDataLoader state."""
    if isinstance(state, dict):
        found = [state] if "chain" in state else []
        return found + [s for v in state.values() for s in pipeline_states(v)]
    if isinstance(state, (list, tuple)):
        return [s for v in state for s in pipeline_states(v)]
    return []
