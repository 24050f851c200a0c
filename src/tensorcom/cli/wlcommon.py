"""What the wl-* tools share: the URL argument, field specs, reading samples, writing output shards,
and turning decoded values into printable ones.

Field specs are tensorcom.fieldspec's, as WebLoader wrote them: several fields separated by commas
or spaces (`-f "__key__ cls"`), alternatives within one field separated by semicolons (`jpg;png`: the
first one the sample has). A sample that lacks a chosen field is an error (SampleError) unless the
tool explicitly asks to skip it (select_fields(..., missing="skip", counts=...)).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
from typing import Any, Callable, Iterable, Iterator

from tensorcom import fieldspec
from tensorcom.cli import common
from tensorcom.errors import ShardError, TensorcomError
from tensorcom.fieldspec import Field
from tensorcom.progress import Progress

SAMPLE_NOT_WRITTEN = ("__url__", "__local_path__", "__shard__", "__index__")
DECODE_CHOICES = ("none", "rgb8", "rgb", "l8", "l", "rgba8", "rgba", "pil")
_NUMPY_INLINE_LIMIT = 16  # arrays with more elements print as a summary


def make_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A common.Parser (one-line usage errors; options anywhere around the URL) with the positional
    URL every wl-* tool takes; `description` (the tool module's docstring, with its examples) is shown
    as written."""
    parser = common.Parser(prog=prog, description=description,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "url",
        help="shard URL(s): path, file://, http(s)://, s3://, pipe:CMD or '-'; brace expansion "
        "(data-{000..009}.tar) and '::' between several specs",
    )
    parser.add_argument("--no-end-blocks", dest="require_end_blocks", action="store_false",
                        help="accept shards that end without their end-of-archive blocks (by default "
                        "such a shard is reported as truncated)")
    return parser


def add_progress_args(parser: argparse.ArgumentParser) -> None:
    """`-q/--quiet`: no progress bar or lines (samples and shards written so far) on stderr."""
    common.add_quiet_argument(parser, "progress bar or periodic progress lines")


def progress(prog: str, args: argparse.Namespace) -> Progress:
    """The samples-written Progress of tool `prog`, off with --quiet (see tensorcom.progress)."""
    return Progress(prog, unit="samples", enabled=not args.quiet)


def count_written(shown: Progress, sink: Any) -> None:
    """One more sample written to `sink`; the shards it has started too when it is a ShardWriter."""
    shards = getattr(sink, "shards", None)
    if shards is None:
        shown.update(1)
    else:
        shown.update(1, shards=len(shards))


def add_range_args(parser: argparse.ArgumentParser, count_default: int | None = None) -> None:
    """Add -c/--count (samples to use) and -s/--skip (samples to pass over first)."""
    parser.add_argument("-c", "--count", type=common.nonnegative_int, default=count_default,
                        help=f"number of samples to use (default: {count_default or 'all'})")
    parser.add_argument("-s", "--skip", type=common.nonnegative_int, default=0,
                        help="number of samples to skip first (default: 0)")


def parse_fields(values: list[str] | None) -> tuple[Field, ...] | None:
    """Field specs from the command line (each may hold several) → parsed fields (tensorcom.fieldspec),
    or None ("all fields") when no option was given."""
    return None if not values else fieldspec.parse_fields(values, "--fields")


def select_fields(sample: dict, fields: tuple[Field, ...] | None, missing: str = "raise",
                  counts: dict | None = None) -> dict:
    """The sample restricted to `fields`, each under the name the sample has ("png" for "jpg;png"), with
    __key__ and __url__ kept; all of it when fields is None. A missing field raises SampleError unless
    `missing="skip"` (then it is left out and counted in `counts`): tensorcom.fieldspec.select_fields."""
    if fields is None:
        return dict(sample)
    return fieldspec.select_fields(sample, fields, missing=missing, counts=counts, keys="found")


def samples(url: str, skip: int = 0, count: int | None = None, handler: Any = None,
            require_end_blocks: bool = True) -> Iterator[dict]:
    """Raw samples of `url` (dicts: __key__, __url__, extension → bytes), after `skip`, at most `count`;
    `require_end_blocks` as in tensorcom.shards._tarstream.tar_members."""
    from tensorcom import shards

    # every shard, whatever RANK / WORLD_SIZE or a DataLoader worker would say
    stream = shards.samples(url, handler=handler, rank=0, world_size=1, worker=0, num_workers=1,
                            require_end_blocks=require_end_blocks)
    stop = None if count is None else skip + count
    try:
        yield from itertools.islice(stream, skip, stop)
    finally:
        try:
            stream.close()
        except ShardError:
            pass  # only an early stop gets here: a `pipe:` source killed by SIGPIPE, say; not an error for us


def run_tasks(func: Callable[[Any], Any], items: Iterable[Any], processes: int,
              buffer: int | None = None) -> Iterator[Any]:
    """Yield func(item) for each item, in input order: in this process when `processes` is 0, else in
    that many spawned processes (tensorcom.pipeline.workers.parallel_map; `func` must be picklable, `buffer`
    items at most in flight). The first item that fails *in input order* ends the iteration with a
    WorkerError naming its key (so which error is reported does not depend on timing); a worker
    process that dies ends it with WorkerDied. Closing the iterator stops and joins the workers."""
    from tensorcom.pipeline.workers import parallel_map, serial_map

    if processes == 0:
        return serial_map(items, func)
    return parallel_map(items, func, workers=processes, processes=True, buffer=buffer)


def shard_list(url: str) -> list[str]:
    """The shard URLs that `url` names, in order ("::" joins, brace expansion, `name-@000123.tar`)."""
    from tensorcom.shards import expand_urls

    return expand_urls(url)


def decode(sample: dict, image: str) -> dict:
    """The sample decoded by extension with images as `image` ("rgb8", ...); unchanged for "none"."""
    if image == "none":
        return sample
    from tensorcom.shards import decode_sample

    return decode_sample(sample, image=image)


def raw_size(sample: dict) -> int:
    """Bytes in the sample's fields (metadata keys like __key__ not counted)."""
    return sum(len(v) for k, v in sample.items()
               if not k.startswith("__") and isinstance(v, (bytes, bytearray, memoryview)))


def field_bytes(value: Any) -> bytes:
    """A raw field value (bytes-like, or str such as __key__) as the bytes to write out: str as UTF-8."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def writable(sample: dict) -> dict:
    """The sample without reader metadata (__url__ and the like) that does not belong in an output shard."""
    return {k: v for k, v in sample.items() if k not in SAMPLE_NOT_WRITTEN}


def open_writer(pattern: str, maxcount: int | None = None, maxsize: int | None = None):
    """A ShardWriter when `pattern` holds a % field (out-%06d.tar), otherwise one TarWriter."""
    from tensorcom import shards

    if "%" in pattern:
        kwargs = {k: v for k, v in (("maxcount", maxcount), ("maxsize", maxsize)) if v is not None}
        return shards.ShardWriter(pattern, **kwargs)
    if maxcount is not None or maxsize is not None:
        raise ValueError(f"--maxcount/--maxsize need a shard pattern with a %d field, got {pattern!r}")
    return shards.TarWriter(pattern)


@contextlib.contextmanager
def writing(pattern: str, maxcount: int | None = None, maxsize: int | None = None):
    """open_writer as a `with` block that completes the output on success. An Exception inside it
    abandons the shard being written (completed ones stay; nothing partial is left under a final
    name) and comes out as one ShardError line naming that shard and its sample count, chained to it."""
    with open_writer(pattern, maxcount, maxsize) as sink:
        try:
            yield sink
        except Exception as exc:
            abandoned = sink.abort()
            if abandoned is None:
                raise
            first = (str(exc).splitlines() or [""])[0]
            message = first if isinstance(exc, TensorcomError) else f"{type(exc).__name__}: {first}"
            raise ShardError(f"{message}; {abandoned}") from exc


def plain(value: Any) -> Any:
    """A JSON-compatible stand-in for a decoded field value.

    str/int/float/bool/None/list/dict pass; bytes become text when they are UTF-8, else "<N bytes>";
    small numpy arrays become lists, larger ones "<array uint8 32x32x3>"; anything else its repr.
    """
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _bytes_text(bytes(value))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        if getattr(value, "size", 0) <= _NUMPY_INLINE_LIMIT:
            return value.tolist()
        return f"<array {value.dtype} {'x'.join(map(str, value.shape))}>"
    if hasattr(value, "size") and hasattr(value, "mode"):  # PIL image
        return f"<image {value.mode} {value.size[0]}x{value.size[1]}>"
    return repr(value)


def _bytes_text(data: bytes) -> str:
    """UTF-8 text of `data` when it is printable text, otherwise a "<N bytes>" placeholder."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(data)} bytes>"
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return f"<{len(data)} bytes>"
    return text


def stdout_binary():
    """The binary stream behind stdout."""
    return sys.stdout.buffer
