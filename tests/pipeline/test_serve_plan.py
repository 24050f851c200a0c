"""tensorcom.pipeline.serve_plan and function_source: publisher counts from URLs, a batch count spread
over the publishers, and a user's function (Pipeline or iterable of batches) as a pipeline factory."""

from __future__ import annotations

import pickle
import textwrap

import pytest

from tensorcom.pipeline import Pipeline
from tensorcom.pipeline.function_source import FunctionPipeline
from tensorcom.pipeline.serve_plan import Limited, ServePlan


def test_publishers_follow_the_urls():
    assert ServePlan(["zpub://127.0.0.1:1", "zpub://127.0.0.1:2"]).publishers() == 2
    assert ServePlan(["zpush://127.0.0.1:1"], workers=3).publishers() == 3
    with pytest.raises(ValueError, match="binding"):
        ServePlan(["zpub://127.0.0.1:1"], workers=2).publishers()


def test_count_is_spread_over_the_publishers():
    plan = ServePlan(["zpush://127.0.0.1:1"], workers=2, count=5)
    served, epochs = plan.limited(Pipeline(range(2)))
    assert epochs == 1 and list(served) == [0, 1, 0]  # ceil(5 / 2) per publisher, epochs back to back
    factory, epochs = plan.limited(pickle.loads(pickle.dumps(Limited(Pipeline(range(4)), None, 6))))
    assert isinstance(factory, Limited) and epochs == 1 and list(factory()) == [0, 1, 2]
    assert ServePlan(epochs=3).limited("m:f") == ("m:f", 3)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "servefn_k3.py").write_text(textwrap.dedent('''
        import tensorcom
        def batches():
            return [[i] for i in range(6)]
        def pipeline():
            return tensorcom.Pipeline(range(4))
        def number():
            return 42
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "servefn_k3"


def test_function_pipeline(user_module):
    assert list(FunctionPipeline(f"{user_module}:pipeline")()) == [0, 1, 2, 3]
    made = pickle.loads(pickle.dumps(FunctionPipeline(f"{user_module}:batches")))()
    assert list(made) == [[i] for i in range(6)]
    assert [b for b in made.shard(1, 2)] == [[1], [3], [5]]  # every other batch for worker 1 of 2
    shuffled = list(FunctionPipeline(f"{user_module}:batches", shuffle=6)())
    assert sorted(shuffled) == [[i] for i in range(6)] and shuffled != [[i] for i in range(6)]
    with pytest.raises(TypeError, match="int"):
        FunctionPipeline(f"{user_module}:number")()
