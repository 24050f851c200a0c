"""A user's function as a pipeline factory: what `tensorcom serve MODULE:FUNCTION` serves.

    FunctionPipeline("mymodule:make", shuffle=0)()   -> a Pipeline

FUNCTION takes no arguments and returns a `tensorcom.Pipeline` or any iterable of batches. A Pipeline
is served as it is; an iterable becomes a Pipeline over a FunctionSource, which calls FUNCTION again
for every epoch and gives worker i of N every N-th item (so every worker computes the whole iterable).
"""

from __future__ import annotations

from typing import Any, Iterator

from tensorcom.pipeline._pipeline import Pipeline
from tensorcom.pipeline.sources import Source
from tensorcom.wire import strided


class FunctionSource(Source):
    """A Source that calls the function named `spec` ("module:function") for every epoch and yields
    every `num_workers`-th item of what it returns, starting at `worker`. `first`: the iterable of the
    call that created this source, used for the first epoch in this process (never pickled)."""

    def __init__(self, spec: str, first: Any = None):
        self.spec = spec
        self.first = first

    def __getstate__(self) -> dict:
        return {"spec": self.spec, "first": None}

    def iterate(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Iterator[Any]:
        from tensorcom.pipeline.serving import load_factory

        items = self.first if self.first is not None else load_factory(self.spec)()
        self.first = None
        return strided(iter(items), worker, num_workers)


class FunctionPipeline:
    """Picklable pipeline factory for tensorcom.serve: calls `spec` and returns its Pipeline, or wraps
    an iterable of batches into a Pipeline over a FunctionSource; with `shuffle` > 0, the items are
    then shuffled through a buffer of that many. TypeError for anything but a Pipeline or an iterable."""

    def __init__(self, spec: str, shuffle: int = 0):
        self.spec, self.shuffle = spec, shuffle

    def __call__(self) -> Pipeline:
        from tensorcom.pipeline.serving import load_factory

        made = load_factory(self.spec)()
        if not isinstance(made, Pipeline):
            if not hasattr(made, "__iter__") or isinstance(made, (str, bytes, dict)):
                raise TypeError(f"{self.spec} returned {type(made).__name__}; "
                                "it must return a tensorcom Pipeline or an iterable of batches")
            made = Pipeline(FunctionSource(self.spec, made))
        return made.shuffle(self.shuffle) if self.shuffle else made
