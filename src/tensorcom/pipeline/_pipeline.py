"""`Pipeline`: a source and a chain of stages, in one chainable style.

    Pipeline(source, seed=0)                      source: any iterable, a tensorcom.pipeline.sources.Source, or a
                                                  Hugging Face Dataset / IterableDataset (pipeline.hf_sources)
    Pipeline.mix(members, weights, seed=0, policy="random", on_end="stop")   a weighted mixture as the source
      .map(fn, rng=False, workers=0, processes=False, ordered=True, buffer=None)
      .cache(dir, max_side=None, max_bytes=None)    decode images once, map them from files (pipeline.cache)
      .filter(predicate)  .select(*fields)  .to_tuple(*fields)  .shuffle(bufsize)
      .batch(n, partial=True, collate=default_collate)  .unbatch()  .rebatch(n, ...)
      .repeat(epochs=None)  .take(n)  .prefetch(n=2)
      .parallel(workers, processes=True, buffer=2, init=None)   everything before it, in N processes
      .decode(*handlers, handler=None)  .rename(new="old1;old2")  .map_dict(field=fn)  .map_tuple(fn0, ...)
      .slice([start,] stop[, step])  .with_epoch(n)  .with_length(n)     WebDataset's stages
    iter(p), len(p) (TypeError when unknown), p.set_epoch(e), p.shard(worker, num_workers)

Every chaining method returns a new Pipeline and leaves the old one as it was, so a pipeline is a
value: it can be shared, extended twice, pickled (when its functions are module-level) and sent to
another process. Nothing runs and no worker starts until iteration; each `iter()` builds the chain
of nodes (tensorcom.pipeline._chain) for the current epoch. `Pipeline(other_pipeline_or_ShardDataset)`
continues that pipeline (same source, steps and seed).

State: `p.state_dict()` is the position of the latest iterator of `p` (epoch, portion, and the state of
every node of its chain); `p.load_state_dict(state)` makes the next `iter(p)` yield exactly the items
that followed, wherever the checkpoint was taken (inside a shuffle buffer, a batch, a map on worker
threads or processes, a parallel stage). Inside a torch DataLoader worker (or a StatefulDataLoader's)
the state is that worker's.

Options are checked when the pipeline is built: a misspelled keyword is a TypeError that says
"did you mean ...".

Randomness: `map(fn, rng=True)` calls fn(sample, rng) with a numpy Generator that is a pure function
of (seed, epoch, shard worker, stage index, sample position) — the same whichever thread or process
runs it — and `shuffle` draws from (seed, epoch, worker, stage). `set_epoch(e)` changes all of them.

`parallel(N)` runs all the stages before it in N spawned processes, process i on portion i of N of
the source (as torch DataLoader workers do), and yields their items round-robin; after `.batch()`
only whole batches cross the process boundary (tensorcom.pipeline._portions). Each portion has its own
worker index in the rng key, so `parallel(N, processes=False)` (threads) yields exactly the same items.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from tensorcom.batch import default_collate
from tensorcom.fieldspec import parse_fields
from tensorcom.pipeline._chain import build_chain, chain_length
from tensorcom.pipeline._fieldstages import DictMapper, Renamer, SampleDecoder, TupleMapper, kept
from tensorcom.pipeline._mix_source import Mix
from tensorcom.pipeline._node import Node
from tensorcom.pipeline._sliced import slice_bounds
from tensorcom.pipeline.autoscale import Elastic
from tensorcom.pipeline.hf_sources import as_source
from tensorcom.pipeline.sources import Source
from tensorcom.pipeline.workers import WorkerPool, check_picklable
from tensorcom.checks import check_options
from tensorcom.checks import non_negative as _non_negative
from tensorcom.checks import positive as _positive
from tensorcom.shards.fields import Decoder
from tensorcom.shards.handlers import Handler, SkipCounts
from tensorcom.shards.shardlist import worker_and_count


@dataclass(frozen=True, eq=False)
class Step:
    """One stage of a pipeline: its kind (the method that made it) and that method's arguments.
    Compared and hashed by identity: it is the key of its persistent worker pool."""

    kind: str
    args: dict = field(default_factory=dict)


def _callable(name: str, value: Any) -> Callable:
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}: {value!r}")
    return value


def _checked_options(cls: type) -> type:
    """Wrap every public method of `cls` so that a misspelled keyword is a TypeError with "did you mean"."""
    for name, method in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(method):
            continue
        parameters = inspect.signature(method).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in parameters):
            continue  # takes any keyword (rename, map_dict)
        known = [p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)][1:]
        setattr(cls, name, _checking(method, f"Pipeline.{name}()", known))
    return cls


def _checking(method: Callable, where: str, known: list[str]) -> Callable:
    @functools.wraps(method)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        check_options(where, kwargs, known)
        return method(self, *args, **kwargs)

    return checked


@_checked_options
class Pipeline:
    """A source plus stages; iterate it for one epoch of samples (or batches)."""

    def __init__(self, source: Any, *, seed: int | None = None):
        inner = source.as_pipeline() if hasattr(source, "as_pipeline") else source
        if isinstance(inner, Pipeline):  # continue that pipeline (a ShardDataset's, say)
            self.__dict__.update(inner._copy(_pools={}).__dict__)
            self.seed = inner.seed if seed is None else _non_negative("seed", seed)
            return
        self.seed = 0 if seed is None else _non_negative("seed", seed)
        self.source: Source = as_source(source)
        self.steps: tuple[Step, ...] = ()
        self.epoch = 0
        self.worker = 0
        self.num_workers = 1
        self._pools: dict[Any, WorkerPool] = {}  # persistent maps' and parallel stages' workers; shared by copies
        self._live: tuple[Node, int, int] | None = None  # the latest iterator, its worker and portion count
        self._resume: dict | None = None  # the state the next iterator starts from

    def __getstate__(self) -> dict:
        # workers and live iterators stay with the process that started them
        return {**self.__dict__, "_pools": {}, "_live": None}

    def close(self) -> None:
        """Stop the workers of persistent maps and parallel stages (restarted by a later iteration)."""
        for pool in self._pools.values():
            pool.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _copy(self, **changes: Any) -> Pipeline:
        new = object.__new__(Pipeline)
        new.__dict__.update(self.__dict__, _live=None, _resume=None)
        new.__dict__.update(changes)
        return new

    def _then(self, kind: str, **args: Any) -> Pipeline:
        return self._copy(steps=self.steps + (Step(kind, args),))

    @staticmethod
    def mix(members: Any, weights: Any = None, *, seed: int = 0, policy: str = "random", window: int = 1000,
            on_end: str = "stop") -> Pipeline:
        """A pipeline whose source draws each sample from one of `members` (Sources, Pipelines, any
        re-iterable; a list, or a dict by name) with probabilities `weights`: policy "random" (each
        draw independent) or "exact" (the proportions exact in every `window` samples); a member that
        runs out ends the mixture (on_end="stop"), starts its next pass ("resample": endless), or
        drops out, the others' weights renormalised ("drop"). See tensorcom.pipeline.Mix."""
        return Pipeline(Mix(members, weights, policy=policy, window=window, on_end=on_end), seed=seed)

    # --- stages ---------------------------------------------------------------------------------

    def map(self, fn: Callable, *, rng: bool = False, workers: int | str | Elastic = 0, processes: bool = False,
            ordered: bool = True, buffer: int | None = None, persistent: bool | None = None) -> Pipeline:
        """Apply fn(sample) — or fn(sample, rng) with rng=True — to each sample. `workers` > 0 runs it
        on that many threads (I/O-bound fn) or, with processes=True, spawned processes (CPU-bound;
        fn must then be picklable: a module-level function or callable object). `ordered=False`
        yields results as they finish; `buffer` bounds samples in flight (default 2 × workers).
        `persistent` keeps the workers between epochs, until close() or garbage collection (default:
        processes are kept, threads are not). `workers="auto"` (or an autoscale.Elastic(min, max)):
        a kept pool whose size follows the load as it runs (tensorcom.pipeline.autoscale)."""
        _callable("map function", fn)
        if Elastic.of(workers) is None:
            _non_negative("workers", workers)
        if buffer is not None:
            _positive("buffer", buffer)
        if processes and workers == 0:
            raise ValueError("processes=True needs workers >= 1")
        if processes:
            check_picklable(fn, "map function")
        return self._then("map", fn=fn, rng=rng, workers=workers, processes=processes, ordered=ordered,
                          buffer=buffer, persistent=persistent)

    def cache(self, directory: str | None, *, max_side: int | None = None, max_bytes: int | None = None,
              key: str | None = None) -> Pipeline:
        """Decode each dict sample's image once (shorter side <= `max_side`) into a file under `directory`
        (None: the server's `--cache DIR`; at most `max_bytes`), mapped in later epochs: the field
        becomes HWC uint8 (pipeline.cache)."""
        from tensorcom.pipeline.cache import decoded_cache

        return self.map(decoded_cache(self.source, directory, max_side=max_side, max_bytes=max_bytes, key=key))

    def filter(self, predicate: Callable[[Any], bool]) -> Pipeline:
        """Keep the samples for which predicate(sample) is true."""
        return self._then("filter", predicate=_callable("predicate", predicate))

    def select(self, *fields: str) -> Pipeline:
        """Keep only these fields of dict samples (plus `__key__` and `__url__`), each under its first
        name; fields as tensorcom.fieldspec parses them ("jpg;png cls"). SampleError for a missing one."""
        return self._then("select", fields=parse_fields(fields, "select"))

    def to_tuple(self, *fields: str) -> Pipeline:
        """Turn dict samples into tuples of these fields, as tensorcom.fieldspec parses them: "jpg;png"
        takes the first present, "jpg;png cls" (or "jpg,cls") names two. SampleError for a missing one."""
        return self._then("to_tuple", fields=parse_fields(fields, "to_tuple"))

    def shuffle(self, bufsize: int) -> Pipeline:
        """Shuffle through a buffer of `bufsize` samples (reproducible per seed and epoch)."""
        return self._then("shuffle", bufsize=_positive("bufsize", bufsize))

    def batch(self, size: int, *, partial: bool = True, collate: Callable[[list], Any] = default_collate) -> Pipeline:
        """Group `size` samples into a batch with `collate` (tensorcom.batch.default_collate: arrays
        stacked, numbers → arrays, other values → lists; dict samples → dict batch, tuples → tuple of
        fields). `partial=False` drops a short last batch."""
        return self._then("batch", size=_positive("batch size", size), partial=partial, collate=_callable("collate", collate))

    def unbatch(self) -> Pipeline:
        """Split batches back into samples (tensorcom.batch.rows): a dict batch into dicts, a list or
        tuple batch (a container of fields, as a Connection yields them) into tuples, an array into
        its rows. ValueError naming a field that has no rows or another number of them."""
        return self._then("unbatch")

    def rebatch(self, size: int, *, partial: bool = True, collate: Callable[[list], Any] = default_collate) -> Pipeline:
        """Regroup batches of any size into batches of `size`: unbatch(), then batch(size, partial=,
        collate=); the rows are those of Connection(batch_size=) for the same batches."""
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
        processes=False), worker i on portion i of `workers` of this pipeline's portion of the source,
        and yield their items round-robin (a worker whose portion ends drops out). Put it after
        `.batch()` so that only batches cross to this process (each portion batches on its own, so
        every portion may end with a short batch). Each worker computes at most `buffer` items ahead;
        `init()` (picklable, e.g. tensorcom.images.init_worker) runs first in each process. The
        processes live across epochs until close(), each starting its portion of the next epoch as
        soon as its portion of this one ends (tensorcom.pipeline._portions.PortionPool).
        The stages before it must be picklable, and process maps cannot run inside (use threads there)."""
        _positive("workers", workers)
        _positive("buffer", buffer)
        if init is not None:
            _callable("init", init)
        if processes:
            check_picklable(self.steps, "pipeline stage")  # the source is pickled when the workers start
            if init is not None:
                check_picklable(init, "init function")
        return self._then("parallel", workers=workers, processes=processes, buffer=buffer, init=init)

    # --- WebDataset's stages (functions in tensorcom.pipeline._fieldstages, _sliced) -------------

    def decode(self, *handlers: str | Callable[[str, bytes], Any], handler: Handler | None = None,
               counts: SkipCounts | None = None, allow_pickle: bool = False) -> Pipeline:
        """Decode the bytes fields of dict samples (tensorcom.shards.fields.Decoder): `handlers` are
        image modes ("rgb8", "rgb", "l8", "pil", "numpy", "torch": CHW float, ...) and callables
        (field name, bytes) -> value or None, tried in order; other fields decode by extension. A
        sample that fails goes to the bad-data policy `handler` (None: raise; warn_and_continue /
        ignore_and_continue drop it and count it in `counts`)."""
        decoder = SampleDecoder(Decoder(*handlers, allow_pickle=allow_pickle), handler, counts)
        return self.map(decoder) if handler is None else self.map(decoder).filter(kept)

    def rename(self, keep: bool = True, **names: str) -> Pipeline:
        """Rename fields of dict samples, new="old1;old2" (the first old field present); `keep=False`
        drops the fields not named (but `__key__`, `__url__`)."""
        return self.map(Renamer(names, keep))

    def map_dict(self, **fns: Callable[[Any], Any]) -> Pipeline:
        """Apply fns[field] to those fields of dict samples (field=fn)."""
        return self.map(DictMapper(fns))

    def map_tuple(self, *fns: Callable[[Any], Any] | None) -> Pipeline:
        """Apply fns[i] to item i of tuple samples (None: leave it)."""
        return self.map(TupleMapper(fns))

    def slice(self, *args: int | None) -> Pipeline:
        """Items as itertools.islice(items, *args) picks them: slice(stop) or slice(start, stop[, step])."""
        start, stop, step = slice_bounds(*args)
        return self._then("slice", start=start, stop=stop, step=step)

    def with_length(self, count: int) -> Pipeline:
        """Declare len() of this pipeline (per shard worker); iteration is unchanged."""
        return self._then("with_length", count=_non_negative("length", count))

    def with_epoch(self, count: int) -> Pipeline:
        """Make an epoch exactly `count` items (per shard worker), as WebDataset does: the stages before
        run again (as repeat() does) until `count` items have come; len() is `count`."""
        return self.repeat().take(_non_negative("epoch length", count)).with_length(count)

    # --- epochs, sharding, iteration -----------------------------------------------------------

    def set_epoch(self, epoch: int) -> Pipeline:
        """Use `epoch` for the next iterations (changes shuffles and rngs), from its start; returns self."""
        self.epoch = _non_negative("epoch", epoch)
        self._live = self._resume = None
        return self

    def shard(self, worker: int, num_workers: int) -> Pipeline:
        """A copy that iterates only portion `worker` of `num_workers` disjoint portions of the source."""
        _positive("num_workers", num_workers)
        if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < num_workers:
            raise ValueError(f"worker must be in 0..{num_workers - 1}, got {worker!r}")
        return self._copy(worker=worker, num_workers=num_workers)

    def __iter__(self) -> Iterator[Any]:
        """One epoch's items, from the state given to load_state_dict if any. Inside a torch
        DataLoader worker an unsharded pipeline takes that worker's portion (the only place where a
        pipeline splits by worker), so num_workers > 0 never duplicates samples."""
        portion = self
        if self.num_workers == 1:
            worker, num_workers = worker_and_count(None, None)
            portion = self.shard(worker, num_workers) if num_workers > 1 else self
        chain = build_chain(portion, len(portion.steps), self.epoch)
        resume, self._resume = self._resume, None
        if resume is not None:
            if (resume["worker"], resume["num_workers"]) != (portion.worker, portion.num_workers):
                raise ValueError(f"the state is of portion {resume['worker']} of {resume['num_workers']}, "
                                 f"this iterator is portion {portion.worker} of {portion.num_workers}")
            chain.load_state_dict(resume["chain"])
        self._live = (chain, portion.worker, portion.num_workers)
        return chain

    def state_dict(self) -> dict[str, Any]:
        """Where the latest iterator stands: {"seed", "epoch", "worker", "num_workers", "chain": the
        state of its nodes (None: the start of the epoch)}; plain dicts, lists and numbers."""
        if self._live is not None:
            chain, worker, num_workers = self._live
            return {"seed": self.seed, "epoch": self.epoch, "worker": worker, "num_workers": num_workers,
                    "chain": chain.state_dict()}
        if self._resume is not None:
            return dict(self._resume)
        if self.__dict__.get("_handed_to_workers") and not _in_torch_worker():
            warnings.warn("this pipeline was handed to a torch DataLoader (iterable_dataset()) and has not been "
                          "iterated in this process: its position lives in the loader's worker processes, so this "
                          "state is the start of the epoch. Checkpoint with torchdata's "
                          "StatefulDataLoader.state_dict() instead.", RuntimeWarning, stacklevel=2)
        return {"seed": self.seed, "epoch": self.epoch, "worker": self.worker, "num_workers": self.num_workers,
                "chain": None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next iteration continue after the items that preceded `state` (from state_dict of
        an equal pipeline). ValueError for a state of another seed."""
        if not isinstance(state, dict) or not {"seed", "epoch", "chain"} <= set(state):
            raise TypeError(f"not a Pipeline state: {state!r:.200}")
        if state["seed"] != self.seed:
            raise ValueError(f"the state is of a pipeline with seed {state['seed']}, this one has seed {self.seed}")
        self.epoch = _non_negative("epoch", state["epoch"])
        self._live = None
        self._resume = {"worker": self.worker, "num_workers": self.num_workers, **state}

    def _subshard(self, index: int, count: int, steps: int) -> Pipeline:
        """A copy with the first `steps` stages on portion `index` of `count` of this pipeline's portion."""
        return self._copy(steps=self.steps[:steps], worker=self.worker + self.num_workers * index,
                          num_workers=self.num_workers * count, _pools={})

    def length(self) -> int | None:
        """Number of items one iteration yields (for this shard), or None when it cannot be known."""
        return chain_length(self, len(self.steps))

    def __len__(self) -> int:
        size = self.length()
        if size is None:
            raise TypeError("this pipeline's length is unknown (its source has no len, or a filter, "
                            "unbatch, rebatch or endless repeat makes it unpredictable)")
        return size

    def handed_to_workers(self) -> None:
        """Note that this pipeline is now iterated by a loader's worker processes (tensorcom.torch.
        iterable_dataset calls this): state_dict() here, before any iteration here, then warns."""
        self._handed_to_workers = True

    def as_torch(self) -> Any:
        """Deprecated: `tensorcom.torch.iterable_dataset(pipeline)` (the torch wrapper is the adapters'
        layer's; a pipeline stays a plain iterable)."""
        return deprecated_as_torch(self)

    def __repr__(self) -> str:
        names = "".join(f".{s.kind}({', '.join(f'{k}={v!r}' for k, v in s.args.items())})" for s in self.steps)
        return f"Pipeline({type(self.source).__name__}, seed={self.seed}){names}"


def deprecated_as_torch(source: Any) -> Any:
    """`Pipeline.as_torch()` / `ShardDataset.as_torch()`: a DeprecationWarning, then
    tensorcom.torch.iterable_dataset(source), reached through the package's public face at call time."""
    import tensorcom

    warnings.warn(f"{type(source).__name__}.as_torch() is deprecated: use tensorcom.torch.iterable_dataset(...)",
                  DeprecationWarning, stacklevel=3)
    return tensorcom.torch.iterable_dataset(source)


def _in_torch_worker() -> bool:
    """Whether this process is a torch DataLoader worker (torch is imported by then)."""
    import torch.utils.data

    return torch.utils.data.get_worker_info() is not None
