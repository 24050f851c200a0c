"""`Pipeline`: a source and a chain of stages, in one chainable style.

    Pipeline(source, seed=0)                      source: any iterable or a tensorcom.pipeline.sources.Source
      .map(fn, rng=False, workers=0, processes=False, ordered=True, buffer=None)
      .filter(predicate)  .select(*fields)  .to_tuple(*fields)  .shuffle(bufsize)
      .batch(n, partial=True, collate=default_collate)  .unbatch()  .rebatch(n, ...)
      .repeat(epochs=None)  .take(n)  .prefetch(n=2)
      .parallel(workers, processes=True, buffer=2, init=None)   everything before it, in N processes
    iter(p), len(p) (TypeError when unknown), p.set_epoch(e), p.shard(worker, num_workers)

Every chaining method returns a new Pipeline and leaves the old one as it was, so a pipeline is a
value: it can be shared, extended twice, pickled (when its functions are module-level) and sent to
another process. Nothing runs and no worker starts until iteration; each `iter()` rebuilds the
stage generators for the current epoch.

Randomness: `map(fn, rng=True)` calls fn(sample, rng) with a numpy Generator that is a pure function
of (seed, epoch, shard worker, stage index, sample position) — the same whichever thread or process
runs it — and `shuffle` draws from (seed, epoch, worker, stage). `set_epoch(e)` changes all of them.

`parallel(N)` runs all the stages before it in N spawned processes, process i on share i of N of
the source (as torch DataLoader workers do), and yields their items round-robin; after `.batch()`
only whole batches cross the process boundary (tensorcom.pipeline._shares). Each share has its own
worker index in the rng key, so `parallel(N, processes=False)` (threads) yields exactly the same items.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from tensorcom.pipeline import stages
from tensorcom.pipeline._shares import shard_parallel
from tensorcom.pipeline.sources import IterableSource, Source
from tensorcom.pipeline.workers import (
    WorkerPool,
    check_picklable,
    parallel_map,
    prefetching,
)


@dataclass(frozen=True, eq=False)
class Step:
    """One stage of a pipeline: its kind (the method that made it) and that method's arguments.
    Compared and hashed by identity: it is the key of its persistent worker pool."""

    kind: str
    args: dict = field(default_factory=dict)


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _non_negative(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _callable(name: str, value: Any) -> Callable:
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}: {value!r}")
    return value


class Pipeline:
    """A source plus stages; iterate it for one epoch of samples (or batches)."""

    def __init__(self, source: Any, *, seed: int = 0):
        _non_negative("seed", seed)
        self.source: Source = source if isinstance(source, Source) else IterableSource(source)
        self.seed = seed
        self.steps: tuple[Step, ...] = ()
        self.epoch = 0
        self.worker = 0
        self.num_workers = 1
        self._pools: dict[Step, WorkerPool] = {}  # persistent maps' workers; shared by copies

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pools": {}}  # workers stay with the process that started them

    def close(self) -> None:
        """Stop the workers of persistent maps (they restart if the pipeline is iterated again)."""
        for pool in self._pools.values():
            pool.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _copy(self, **changes: Any) -> Pipeline:
        new = object.__new__(Pipeline)
        new.__dict__.update(self.__dict__, **changes)
        return new

    def _then(self, kind: str, **args: Any) -> Pipeline:
        return self._copy(steps=self.steps + (Step(kind, args),))

    # --- stages ---------------------------------------------------------------------------------

    def map(self, fn: Callable, *, rng: bool = False, workers: int = 0, processes: bool = False,
            ordered: bool = True, buffer: int | None = None, persistent: bool = False) -> Pipeline:
        """Apply fn(sample) — or fn(sample, rng) with rng=True — to each sample. `workers` > 0 runs it
        on that many threads (I/O-bound fn) or, with processes=True, spawned processes (CPU-bound;
        fn must then be picklable: a module-level function or callable object). `ordered=False`
        yields results as they finish; `buffer` bounds samples in flight (default 2 × workers).
        `persistent=True` keeps the workers between epochs, until close() or garbage collection."""
        _callable("map function", fn)
        _non_negative("workers", workers)
        if buffer is not None:
            _positive("buffer", buffer)
        if processes and workers == 0:
            raise ValueError("processes=True needs workers >= 1")
        if processes:
            check_picklable(fn, "map function")
        return self._then("map", fn=fn, rng=rng, workers=workers, processes=processes, ordered=ordered,
                          buffer=buffer, persistent=persistent)

    def filter(self, predicate: Callable[[Any], bool]) -> Pipeline:
        """Keep the samples for which predicate(sample) is true."""
        return self._then("filter", predicate=_callable("predicate", predicate))

    def select(self, *fields: str) -> Pipeline:
        """Keep only these fields of dict samples (plus `__key__`); "jpg;png" takes the first present."""
        if not fields or not all(isinstance(f, str) and f for f in fields):
            raise ValueError(f"select needs one or more field names, got {fields!r}")
        return self._then("select", fields=fields)

    def to_tuple(self, *fields: str) -> Pipeline:
        """Turn dict samples into tuples of these fields; "jpg;png" takes the first present."""
        if not fields or not all(isinstance(f, str) and f for f in fields):
            raise ValueError(f"to_tuple needs one or more field names, got {fields!r}")
        return self._then("to_tuple", fields=fields)

    def shuffle(self, bufsize: int) -> Pipeline:
        """Shuffle through a buffer of `bufsize` samples (reproducible per seed and epoch)."""
        return self._then("shuffle", bufsize=_positive("bufsize", bufsize))

    def batch(self, size: int, *, partial: bool = True, collate: Callable[[list], Any] = stages.default_collate) -> Pipeline:
        """Group `size` samples into a batch with `collate` (arrays stacked, numbers → arrays, other
        values → lists; dict samples → dict batch, tuples → tuple). `partial=False` drops a short last batch."""
        return self._then("batch", size=_positive("batch size", size), partial=partial, collate=_callable("collate", collate))

    def unbatch(self) -> Pipeline:
        """Split batches back into samples."""
        return self._then("unbatch")

    def rebatch(self, size: int, *, partial: bool = True, collate: Callable[[list], Any] = stages.default_collate) -> Pipeline:
        """Regroup batches of any size into batches of `size`."""
        return self._then("rebatch", size=_positive("batch size", size), partial=partial, collate=_callable("collate", collate))

    def repeat(self, epochs: int | None = None) -> Pipeline:
        """Run everything before this stage `epochs` times (forever when None), each pass an epoch of
        its own: pass k of pipeline epoch e uses epoch e × epochs + k (e + k when forever)."""
        if epochs is not None:
            _positive("epochs", epochs)
        return self._then("repeat", epochs=epochs)

    def take(self, count: int) -> Pipeline:
        """Stop after `count` items (per shard worker)."""
        return self._then("take", count=_non_negative("take count", count))

    def prefetch(self, size: int = 2) -> Pipeline:
        """Compute up to `size` items ahead in a background thread."""
        return self._then("prefetch", size=_positive("prefetch size", size))

    def parallel(self, workers: int, *, processes: bool = True, buffer: int = 2,
                 init: Callable[[], Any] | None = None) -> Pipeline:
        """Run every stage before this one in `workers` spawned processes (threads with
        processes=False), worker i on share i of `workers` of this pipeline's share of the source,
        and yield their items round-robin (a worker whose share ends drops out). Put it after
        `.batch()` so that only batches cross to this process (each share batches on its own, so
        every share may end with a short batch). Each worker computes at most `buffer` items ahead;
        `init()` (picklable, e.g. tensorcom.images.init_worker) runs first in each process. The
        stages before it must be picklable, and process maps cannot run inside (use threads there)."""
        _positive("workers", workers)
        _positive("buffer", buffer)
        if init is not None:
            _callable("init", init)
        if processes:
            check_picklable(self.steps, "pipeline stage")  # the source is pickled when the workers start
            if init is not None:
                check_picklable(init, "init function")
        return self._then("parallel", workers=workers, processes=processes, buffer=buffer, init=init)

    # --- epochs, sharding, iteration -----------------------------------------------------------

    def set_epoch(self, epoch: int) -> Pipeline:
        """Use `epoch` for the next iterations (changes shuffles and rngs); returns self."""
        self.epoch = _non_negative("epoch", epoch)
        return self

    def shard(self, worker: int, num_workers: int) -> Pipeline:
        """A copy that iterates only share `worker` of `num_workers` disjoint shares of the source."""
        _positive("num_workers", num_workers)
        if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < num_workers:
            raise ValueError(f"worker must be in 0..{num_workers - 1}, got {worker!r}")
        return self._copy(worker=worker, num_workers=num_workers)

    def __iter__(self) -> Iterator[Any]:
        """One epoch's items. Inside a torch DataLoader worker an unsharded pipeline takes that
        worker's share by itself, so num_workers > 0 never duplicates samples."""
        loader_worker = _torch_worker() if self.num_workers == 1 else None
        if loader_worker is not None:
            return self.shard(*loader_worker)._build(len(self.steps), self.epoch)
        return self._build(len(self.steps), self.epoch)

    def _build(self, count: int, epoch: int) -> Iterator[Any]:
        """The generator chain of the first `count` steps for `epoch`."""
        cuts = [i for i in range(count) if self.steps[i].kind in ("repeat", "parallel")]
        if cuts:
            start = cuts[-1] + 1
            run = self._parallel if self.steps[cuts[-1]].kind == "parallel" else self._repeated
            stream = run(cuts[-1], epoch)
        else:
            start = 0
            stream = self.source.iterate(seed=self.seed, epoch=epoch, worker=self.worker, num_workers=self.num_workers)
        for index in range(start, count):
            stream = self._apply(index, stream, epoch)
        return stream

    def _repeated(self, index: int, epoch: int) -> Iterator[Any]:
        """Passes over steps[:index], each with its own epoch; stops early if a pass yields nothing."""
        epochs = self.steps[index].args["epochs"]
        k = 0
        while epochs is None or k < epochs:
            inner = epoch + k if epochs is None else epoch * epochs + k
            empty = True
            for item in self._build(index, inner):
                empty = False
                yield item
            if empty:
                return
            k += 1

    def _subshard(self, index: int, count: int, steps: int) -> Pipeline:
        """A copy with the first `steps` stages on share `index` of `count` of this pipeline's share."""
        return self._copy(steps=self.steps[:steps], worker=self.worker * count + index,
                          num_workers=self.num_workers * count, _pools={})

    def _parallel(self, index: int, epoch: int) -> Iterator[Any]:
        """steps[:index] for `epoch` on the parallel stage's workers, their items round-robin."""
        a = self.steps[index].args
        make = ShareMaker(self._copy(steps=self.steps[:index], _pools={}), epoch)
        return shard_parallel(make, workers=a["workers"], processes=a["processes"], buffer=a["buffer"],
                              init=a["init"])

    def _apply(self, index: int, stream: Iterator[Any], epoch: int) -> Iterator[Any]:
        step = self.steps[index]
        a = step.args
        key = (self.seed, epoch, self.worker, index)
        if step.kind == "map":
            if a["workers"] == 0:
                rngs = (lambda position: stages.sample_rng(*key, position)) if a["rng"] else None
                return stages.mapping(stream, a["fn"], rngs)
            options = {"ordered": a["ordered"], "buffer": a["buffer"], "rng_key": key if a["rng"] else None}
            pool = self._pools.get(step)
            if a["persistent"] and pool is None:
                pool = self._pools[step] = WorkerPool(a["fn"], a["workers"], a["processes"])
            if pool is not None and not pool.busy:
                return pool.map(stream, **options)
            return parallel_map(stream, a["fn"], workers=a["workers"], processes=a["processes"], **options)
        simple: dict[str, Callable[[], Iterator[Any]]] = {
            "filter": lambda: stages.filtering(stream, a["predicate"]),
            "select": lambda: stages.selecting(stream, a["fields"]),
            "to_tuple": lambda: stages.tupling(stream, a["fields"]),
            "shuffle": lambda: stages.shuffling(stream, a["bufsize"], stages.sample_rng(*key, 0)),
            "batch": lambda: stages.batching(stream, a["size"], a["partial"], a["collate"]),
            "unbatch": lambda: stages.unbatching(stream),
            "rebatch": lambda: stages.rebatching(stream, a["size"], a["partial"], a["collate"]),
            "take": lambda: stages.taking(stream, a["count"]),
            "prefetch": lambda: prefetching(stream, a["size"]),
        }
        return simple[step.kind]()

    def length(self) -> int | None:
        """Number of items one iteration yields (for this shard), or None when it cannot be known."""
        return self._length(len(self.steps))

    def _length(self, count: int) -> int | None:
        """Items out of the first `count` steps (None: unknown)."""
        cuts = [i for i in range(count) if self.steps[i].kind == "parallel"]
        if cuts:
            n = self.steps[cuts[-1]].args["workers"]
            sizes = [self._subshard(i, n, cuts[-1])._length(cuts[-1]) for i in range(n)]
            size, start = (None if None in sizes else sum(sizes)), cuts[-1] + 1  # type: ignore[arg-type]
        else:
            size, start = self.source.length(self.worker, self.num_workers), 0
        for step in self.steps[start:count]:
            size = _step_length(step, size)
        return size

    def __len__(self) -> int:
        size = self.length()
        if size is None:
            raise TypeError("this pipeline's length is unknown (its source has no len, or a filter, "
                            "unbatch, rebatch or endless repeat makes it unpredictable)")
        return size

    def as_torch(self) -> Any:
        """This pipeline as a torch.utils.data.IterableDataset (imports torch), for DataLoader: in
        each DataLoader worker an unsharded pipeline takes its own share of the source."""
        from tensorcom._torch_dataset import as_iterable_dataset

        return as_iterable_dataset(self)

    def __repr__(self) -> str:
        names = "".join(f".{s.kind}({', '.join(f'{k}={v!r}' for k, v in s.args.items())})" for s in self.steps)
        return f"Pipeline({type(self.source).__name__}, seed={self.seed}){names}"


class ShareMaker:
    """Picklable `make(i, n)` for shardworkers: the iterator of share i of n of `pipeline` at `epoch`."""

    def __init__(self, pipeline: Pipeline, epoch: int):
        self.pipeline, self.epoch = pipeline, epoch

    def __call__(self, index: int, count: int) -> Iterator[Any]:
        share = self.pipeline._subshard(index, count, len(self.pipeline.steps))
        return share._build(len(share.steps), self.epoch)


def _torch_worker() -> tuple[int, int] | None:
    """(id, num_workers) when running in a torch DataLoader worker (torch already imported), else None."""
    torch = sys.modules.get("torch")
    info = torch.utils.data.get_worker_info() if torch is not None and hasattr(torch, "utils") else None
    return None if info is None else (info.id, info.num_workers)


def _step_length(step: Step, size: int | None) -> int | None:
    """Items out of `step` given `size` items in (None: unknown)."""
    if size is None or step.kind in ("filter", "unbatch", "rebatch"):
        return None
    if step.kind == "batch":
        rounding = math.ceil if step.args["partial"] else math.floor
        return int(rounding(size / step.args["size"]))
    if step.kind == "repeat":
        return None if step.args["epochs"] is None else size * step.args["epochs"]
    if step.kind == "take":
        return min(size, step.args["count"])
    return size
