"""The pipeline layer: sources, stages, parallel workers, and serving a pipeline over ZeroMQ.

    Pipeline(source, seed=0)...        a source and a chain of stages (tensorcom.pipeline._pipeline)
    ShardDataset(urls, ...)            the shortcut that builds the usual Pipeline over tar shards
    IterableSource, ShardSource, PathSource, FetchSource, Source     where samples come from
    ParquetSource, ArrowSource         Parquet / Arrow IPC tables by row group (pyarrow, imported when used)
    HFSource, HFIterableSource         Hugging Face datasets (Pipeline(dataset) picks one by itself)
    Mix(members, weights=..., policy=, on_end=), Pipeline.mix(...)    weighted mixtures of sources
    Node                               the contract of every source and stage: next, state_dict, load_state_dict
    serve(pipeline, urls, workers=N)   run a pipeline in N processes that send to URLs
    WorkerPool, parallel_map, prefetching                             the worker machinery

The public names are imported lazily (on first attribute access, or `from tensorcom.pipeline import
NAME`), so importing one submodule (tensorcom.pipeline.shard_writing for `tensorcom shard`, say) does
not import the rest of the layer. See docs/pipeline.md for the user guide.
"""

from __future__ import annotations

from tensorcom.lazy import lazy_names

# public name -> the submodule that defines it
_EXPORTS: dict[str, str] = {
    "ArrowSource": "tensorcom.pipeline.table_sources",
    "FetchSource": "tensorcom.pipeline.sources",
    "HFIterableSource": "tensorcom.pipeline.hf_sources",
    "HFSource": "tensorcom.pipeline.hf_sources",
    "IterableSource": "tensorcom.pipeline.sources",
    "Mix": "tensorcom.pipeline._mix_source",
    "Node": "tensorcom.pipeline._node",
    "ParquetSource": "tensorcom.pipeline.table_sources",
    "PathSource": "tensorcom.pipeline.sources",
    "Pipeline": "tensorcom.pipeline._pipeline",
    "ShardDataset": "tensorcom.pipeline._shard_dataset",
    "ShardSource": "tensorcom.pipeline.sources",
    "Source": "tensorcom.pipeline.sources",
    "WorkerPool": "tensorcom.pipeline.workers",
    "parallel_map": "tensorcom.pipeline.workers",
    "prefetching": "tensorcom.pipeline.workers",
    "serve": "tensorcom.pipeline.serving",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
