"""The mixed pipeline that test_mix_workers runs under StatefulDataLoader workers and serves with
tensorcom.serve("mixtures:batched_mixture"): a module of its own, so that the processes that import
it (spawned workers, the serving process) import the pipeline and nothing of the tests."""

from __future__ import annotations

import numpy as np

from tensorcom.pipeline import IterableSource, Pipeline


def tagged(i):
    return {"__key__": f"s{i:04d}", "i": np.int32(i)}


def mixed_pipeline():
    """70 samples of two members (40 shuffled numbers, 30 of a shuffled pipeline), 7:3 in every 10,
    a member dropped when it runs out; picklable, for spawned workers and serve("module:function")."""
    members = {"big": IterableSource(range(40), shuffle=True), "small": Pipeline(range(1000, 1030), seed=9).shuffle(5)}
    return Pipeline.mix(members, {"big": 7, "small": 3}, seed=6, policy="exact", window=10, on_end="drop").map(tagged)


def batched_mixture():
    return mixed_pipeline().batch(4)
