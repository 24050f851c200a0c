"""`ShardReader`: the samples of a list of shards, shard after shard, with a position that can be saved.

    reader = ShardReader(urls, handler=None, counts=None, **open_options)
    next(reader)                -> {"__key__", "__url__", ext: bytes}
    reader.state_dict()         -> {"shard": i, "in_shard": j}: j samples of shard i already yielded
    reader.load_state_dict(s)   the next sample is the one after that position (the shard is reopened
                                and its first j samples are parsed again, not yielded)

It follows the pipeline's node contract (iterator + state_dict / load_state_dict / close) without
importing the pipeline layer; `tensorcom.shards.samples` and the pipeline's ShardSource both read
through it. Which shards a reader gets (shuffle, node and worker split) is decided before, in
tensorcom.shards.shardlist.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Sequence

from tensorcom.shards.handlers import Handler, SkipCounts

OPEN_OPTIONS = ("bufsize", "require_end_blocks", "timeout", "retries", "backoff", "headers", "endpoint_url",
                "client_kwargs", "block_size", "key", "secret", "anon")  # known, for "did you mean"


class ShardReader:
    """Iterator over the samples of `urls` in order (see the module docstring). A bad shard or sample
    follows `handler` (default: raise) and is counted in `counts`."""

    def __init__(self, urls: Sequence[str], *, handler: Handler | None = None, counts: SkipCounts | None = None,
                 **open_options: Any):
        self.urls = list(urls)
        self.handler, self.counts, self.open_options = handler, counts, open_options
        self.shard = self.in_shard = 0
        self._stream: Iterator[dict[str, Any]] | None = None

    def __iter__(self) -> ShardReader:
        return self

    def __next__(self) -> dict[str, Any]:
        while self.shard < len(self.urls):
            if self._stream is None:
                from tensorcom.shards._tarstream import shard_samples  # the tar reader, opened when read

                self._stream = shard_samples(self.urls[self.shard], handler=self.handler, counts=self.counts,
                                             **self.open_options)
                for _ in itertools.islice(self._stream, self.in_shard):
                    pass
            try:
                sample = next(self._stream)
            except StopIteration:
                self._stream = None
                self.shard, self.in_shard = self.shard + 1, 0
                continue
            self.in_shard += 1
            return sample
        raise StopIteration

    def state_dict(self) -> dict[str, int]:
        """{"shard": index in this reader's list, "in_shard": samples of it already yielded}."""
        return {"shard": self.shard, "in_shard": self.in_shard}

    def load_state_dict(self, state: dict[str, int] | None) -> None:
        """Continue after `state` (from state_dict); None: from the first sample. ValueError for a
        position outside this reader's shard list."""
        self.close()
        shard, in_shard = (0, 0) if state is None else (int(state["shard"]), int(state["in_shard"]))
        if not 0 <= shard <= len(self.urls) or in_shard < 0:
            raise ValueError(f"position {state} is outside this reader's {len(self.urls)} shards")
        self.shard, self.in_shard = shard, in_shard

    def close(self) -> None:
        """Close the shard being read (a later next() reopens it at the same position)."""
        if self._stream is not None:
            close, self._stream = getattr(self._stream, "close", None), None
            if close is not None:
                close()
