"""The pipeline layer: sources, stages, parallel workers, and serving a pipeline over ZeroMQ.

    Pipeline(source, seed=0)...        a source and a chain of stages (tensorcom.pipeline._pipeline)
    IterableSource, ShardSource, PathSource, FetchSource, Source     where samples come from
    serve(pipeline, urls, workers=N)   run a pipeline in N processes that send to URLs
    WorkerPool, parallel_map, prefetching                             the worker machinery

See docs/pipeline.md for the user guide.
"""

from tensorcom.pipeline._pipeline import Pipeline
from tensorcom.pipeline.serving import serve
from tensorcom.pipeline.sources import (
                  FetchSource,
                  IterableSource,
                  PathSource,
                  ShardSource,
                  Source,
)
from tensorcom.pipeline.workers import WorkerPool, parallel_map, prefetching

__all__ = sorted(["FetchSource", "IterableSource", "PathSource", "Pipeline", "ShardSource", "Source",
                  "WorkerPool", "parallel_map", "prefetching", "serve"])
