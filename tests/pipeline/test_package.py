"""tensorcom.pipeline's public face: a pinned, sorted __all__ whose every name resolves (imported on
first use, so that a submodule can be imported without the rest of the layer)."""

from __future__ import annotations

import pytest

import tensorcom.pipeline as pipeline

EXPECTED = ["ArrowSource", "FetchSource", "HFIterableSource", "HFSource", "IterableSource", "Mix", "Node",
            "ParquetSource", "PathSource", "Pipeline", "ShardDataset", "ShardSource", "Source", "WorkerPool",
            "parallel_map", "prefetching", "serve"]


def test_public_names_are_imported_on_first_use_and_all_resolve():
    from fresh import loaded_by

    assert loaded_by("import tensorcom.pipeline.shard_writing",  # a submodule without the rest of the layer
                     ("tensorcom.pipeline._pipeline", "tensorcom.pipeline.serving", "tensorcom.pipeline.workers",
                      "tensorcom.pipeline.sources")) == []
    assert pipeline.__all__ == EXPECTED
    namespace: dict = {}
    exec("from tensorcom.pipeline import *", namespace)
    for name in EXPECTED:
        value = getattr(pipeline, name)
        assert namespace[name] is value and value.__name__ == name
        assert value.__module__.startswith("tensorcom.pipeline.")
    assert set(EXPECTED) <= set(dir(pipeline))
    from tensorcom.pipeline import sources, stages  # submodules stay importable by name

    assert pipeline.ShardSource is sources.ShardSource and isinstance(stages.Batched, type)
    with pytest.raises(AttributeError, match="no attribute 'Pipline'"):
        pipeline.Pipline  # noqa: B018
