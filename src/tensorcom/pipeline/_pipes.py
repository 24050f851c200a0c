"""Results from worker processes to their parent over pipes, with numpy arrays copied only once.

Each worker process writes to its own one-way pipe. An object travels as pickle protocol 5 with
out-of-band buffers: a header of int64 sizes, the pickle stream, then each buffer written straight
from the array's memory. The reader reads each buffer straight into a fresh uninitialised numpy array
(no zero-filling, large pages where numpy uses them) and unpickles around it, so arrays arrive
writable and copied once (a multiprocessing.Queue copies each array several times, and a
multiprocessing Connection twice on receipt). Pipes are widened to 1 MiB where the
OS allows it, so a typical batch passes in few system calls.

`BufferedSender` puts a bounded queue and a thread in front of a worker's pipe, so the worker
computes ahead while the consumer is busy. The parent's side of the pipes, and of the processes
behind them, is the process owner's (tensorcom.pipeline.processes).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import queue
import threading
from array import array
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # numpy and tenbin serve the reading side (the parent's): a worker only writes
    import numpy as np

PIPE_SIZE = 1 << 20
IOV_MAX = 512  # buffers per writev call (Linux allows 1024)


def widen(conn: Any, size: int = PIPE_SIZE) -> None:
    """Ask the OS for a `size`-byte pipe buffer behind `conn` (ignored where not possible)."""
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except (ImportError, OSError):
        pass


def spawn_with_pipe(ctx: Any, target: Callable, args: Callable[[Any], tuple], name: str,
                    handover: Any = None, daemon: bool = True) -> tuple[Any, Any]:
    """Start process `name` (a daemon unless told otherwise: a daemon may not start processes of its
    own) running target(*args(writer)), where writer is the write end of a fresh one-way pipe
    (widened); returns (process, reader). The parent closes its copy of the write end whatever
    happens, so reading gives EOF once the child is gone. With `handover` (a
    tensorcom.pipeline._semaphores.Handover) the process is made by it."""
    reader, writer = ctx.Pipe(duplex=False)
    widen(writer)
    make = ctx.Process if handover is None else handover.process
    proc = make(target=target, args=args(writer), daemon=daemon, name=name)
    try:
        proc.start()
    finally:
        writer.close()
    return proc, reader


def _write_all(fd: int, parts: list) -> None:
    """Write every part, in order, with as few writev calls as the pipe allows."""
    views = [v for v in (memoryview(p).cast("B") for p in parts) if v.nbytes]
    while views:
        written = os.writev(fd, views[:IOV_MAX])
        while written:
            if written >= views[0].nbytes:
                written -= views.pop(0).nbytes
            else:
                views[0], written = views[0][written:], 0


def _read_exact(stream: io.FileIO, size: int) -> bytearray:
    """Exactly `size` bytes from the pipe; EOFError when it closes first."""
    return _filled(stream, bytearray(size))


def _read_buffer(stream: io.FileIO, size: int) -> np.ndarray:
    """Exactly `size` bytes from the pipe into a new uint8 array (not zero-filled first); EOFError when
    the pipe closes first."""
    import numpy as np

    return _filled(stream, np.empty(size, np.uint8))


def _filled(stream: io.FileIO, buffer: Any) -> Any:
    """`buffer` (bytearray or 1-d uint8 array) filled from the pipe; EOFError when it closes first."""
    from tensorcom.tenbin import fill

    if fill(stream, buffer) < len(buffer):
        raise EOFError("the worker's pipe closed in the middle of a message")
    return buffer


class PipeSender:
    """The worker's end: `put(obj)` pickles obj here (so a pickling error is raised to the caller,
    before anything is written) and writes it to the pipe; blocks while the pipe is full (`timeout`
    is accepted for the outbox protocol of tensorcom.pipeline._loop, and ignored); BrokenPipeError
    once the reader is closed.
    Frame: int64 count of buffers, int64 pickle length, int64 size of each buffer; pickle; buffers."""

    def __init__(self, conn: Any):
        self.conn = conn  # kept so the descriptor stays open
        self.fd = conn.fileno()

    def put(self, obj: Any, timeout: float | None = None) -> None:
        buffers: list[pickle.PickleBuffer] = []
        data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        views = [b.raw() for b in buffers]
        header = array("q", [len(views), len(data), *(v.nbytes for v in views)])
        _write_all(self.fd, [header, data, *views])


class BufferedSender:
    """A PipeSender behind a bounded queue of `size` messages and a thread of its own, so the worker
    computes ahead while the pipe is full. `put(message, timeout)` queues (queue.Full after
    `timeout`), BrokenPipeError once the thread has stopped. The thread writes messages in order
    until an "end" or "error" message has gone, `stop` is set, or the pipe breaks; a message it
    cannot pickle is replaced by `on_error(exc, sent)` (sent: messages written so far), and then
    it stops. `drain(stop)` waits for the thread to finish."""

    def __init__(self, conn: Any, size: int, stop: Any, on_error: Callable[[Exception, int], Any]):
        self.queue: queue.Queue = queue.Queue(size)
        self.sender, self.stop, self.on_error = PipeSender(conn), stop, on_error
        self.thread = threading.Thread(target=self._pump, name="tensorcom-pipe-sender", daemon=True)
        self.thread.start()

    def put(self, message: Any, timeout: float | None = None) -> None:
        if not self.thread.is_alive():
            raise BrokenPipeError("the pipe sender has stopped")
        self.queue.put(message, timeout=timeout)

    def _pump(self) -> None:
        sent = 0
        while not self.stop.is_set():
            try:
                message = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            try:
                self.sender.put(message)
            except BrokenPipeError:
                return  # the parent has gone or closed its end
            except Exception as exc:
                with contextlib.suppress(BrokenPipeError):
                    self.sender.put(self.on_error(exc, sent))
                return
            sent += 1
            if message[0] != "item":
                return

    def drain(self, stop: Any) -> None:
        """Wait until every queued message has gone (or `stop` is set)."""
        while self.thread.is_alive() and not stop.is_set():
            self.thread.join(timeout=0.1)


def receive(stream: io.FileIO) -> Any:
    """Read one object written by PipeSender.put from the raw stream over the pipe's read end;
    EOFError when the writer is gone. Each buffer is read once, straight into its array."""
    count = array("q", _read_exact(stream, 8))[0]
    lengths = array("q", _read_exact(stream, 8 * (count + 1)))
    data = _read_exact(stream, lengths[0])
    buffers = [_read_buffer(stream, size) for size in lengths[1:]]
    return pickle.loads(data, buffers=buffers)


def stream_of(reader: Any) -> io.FileIO:
    """A raw binary stream over `reader`'s descriptor (left open when the stream goes), for `receive`."""
    return io.FileIO(reader.fileno(), "rb", closefd=False)
