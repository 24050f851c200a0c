"""A map pool that grows and shrinks while it runs: nothing lost, duplicated or reordered."""

import pytest

from tensorcom.pipeline import Pipeline
from tensorcom.pipeline.autoscale import Elastic
from tensorcom.pipeline.workers import WorkerPool


def triple(x):
    return 3 * x


def noisy(batch, rng):
    return [x + int(rng.integers(1000)) for x in batch]


def test_resize_mid_map_keeps_every_result_in_order():
    pool = WorkerPool(triple, 3, processes=True, capacity=3)
    taken = []

    def source():
        for x in range(40):
            taken.append(x)
            yield x

    results, ahead = [], []
    try:
        for result in pool.map(source()):
            results.append(result)
            if len(results) == 10:
                pool.resize(1)
            elif len(results) == 25:
                pool.resize(2)
            elif 17 <= len(results) < 25:  # the six tasks handed out before the shrink are done
                ahead.append(len(taken) - len(results))  # taken, not yet yielded
        with pytest.raises(ValueError, match="capacity 3"):
            pool.resize(4)
        assert list(pool.map(range(5))) == [0, 3, 6, 9, 12]  # the next map, on the same workers
    finally:
        pool.close()
    assert results == [3 * x for x in range(40)]
    assert max(ahead) <= 2  # one worker: one task in its hands, one result waiting at most


def auto_pipeline(workers, processes=False):
    return Pipeline(range(60), seed=5).batch(4).map(noisy, rng=True, workers=workers, processes=processes)


def test_auto_map_equals_the_inline_map_and_resumes_exactly(capfd):
    elastic = Elastic(1, 2, window=0, cooldown=0, interval=0)  # decides at every result
    inline = list(auto_pipeline(0))
    auto = auto_pipeline(elastic)
    try:
        assert list(auto) == inline
        first = iter(auto)
        head = [next(first) for _ in range(6)]
        state = auto.state_dict()
    finally:
        auto.close()
    resumed = auto_pipeline(elastic)
    try:
        resumed.load_state_dict(state)
        assert head + list(resumed) == inline
    finally:
        resumed.close()
    with pytest.raises(ValueError, match="'auto'"):
        auto_pipeline("many")
