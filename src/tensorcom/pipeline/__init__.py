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

See docs/pipeline.md for the user guide.
"""

from tensorcom.pipeline._mix_source import Mix
from tensorcom.pipeline._node import Node
from tensorcom.pipeline._pipeline import Pipeline
from tensorcom.pipeline._shard_dataset import ShardDataset
from tensorcom.pipeline.hf_sources import HFIterableSource, HFSource
from tensorcom.pipeline.serving import serve
from tensorcom.pipeline.sources import FetchSource, IterableSource, PathSource, ShardSource, Source
from tensorcom.pipeline.table_sources import ArrowSource, ParquetSource
from tensorcom.pipeline.workers import WorkerPool, parallel_map, prefetching

__all__ = ["ArrowSource", "FetchSource", "HFIterableSource", "HFSource", "IterableSource", "Mix", "Node", "ParquetSource",
           "PathSource", "Pipeline", "ShardDataset", "ShardSource", "Source", "WorkerPool", "parallel_map", "prefetching",
           "serve"]
