"""The ways of opening a URL, one per scheme, and the table that picks one: what gopen, the cache and
the writers' destinations open through (tensorcom.shards.gopen is the front door; its docstring lists
the schemes and their options).

    SCHEMES, opener(url)   scheme_of(url) -> the opener, `(url, mode, **options) -> binary stream`;
                           open_fsspec for any scheme not in the table
    DEFAULT_BUFSIZE        the buffer size every opener and reader here defaults to

Every failure to open or read is an `OpenError` naming the URL (and the command or HTTP status).
"""

from __future__ import annotations

import io
import re
import socket
import subprocess
import sys
import time
from typing import IO, TYPE_CHECKING, Any, Callable

from tensorcom import settings
from tensorcom.errors import OpenError

if TYPE_CHECKING:  # http.client and urllib.request (email, ssl) are imported by the first HTTP stream
    import http.client

DEFAULT_BUFSIZE = 1 << 20
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


def _check_mode(url: str, mode: str, allowed: tuple[str, ...]) -> None:
    if mode not in allowed:
        raise ValueError(f"mode {mode!r} is not supported for {url!r}; use one of {allowed}")


def _no_options(url: str, options: dict[str, Any]) -> None:
    if options:
        raise TypeError(f"options {sorted(options)} are not understood for {url!r}")


def open_local(url: str, mode: str, bufsize: int = DEFAULT_BUFSIZE, **options: Any) -> IO[bytes]:
    """Open a local path or file:// URL; missing files and permission errors become OpenError."""
    _check_mode(url, mode, ("rb", "wb", "ab"))
    _no_options(url, options)
    path = url[len("file://"):] if url.startswith("file://") else url
    try:
        return open(path, mode, buffering=bufsize)
    except OSError as exn:
        raise OpenError(exn.strerror or str(exn), url=url) from exn


def open_stdio(url: str, mode: str, bufsize: int = DEFAULT_BUFSIZE, **options: Any) -> IO[bytes]:
    """`-`: this process's stdin (reading) or stdout (writing), left open when the caller closes it."""
    _check_mode(url, mode, ("rb", "wb"))
    _no_options(url, options)
    stream = sys.stdin.buffer if mode == "rb" else sys.stdout.buffer
    return open(stream.fileno(), mode, buffering=bufsize, closefd=False)


class PipeStream(io.RawIOBase):
    """The stdout (mode "rb") or stdin (mode "wb") of `sh -c CMD`.

    Reading: at end of data the command's exit status is checked; non-zero raises OpenError naming it.
    Writing: close() closes its stdin, waits, and checks the status the same way. Closing a reader
    before the end terminates the command quietly.
    """

    def __init__(self, url: str, mode: str, timeout: float | None = None):
        super().__init__()
        self.url, self.cmd, self.mode, self.timeout = url, url[len("pipe:"):], mode, timeout
        if not self.cmd.strip():
            raise ValueError(f"empty command in {url!r}")
        pipes = {"stdout": subprocess.PIPE} if mode == "rb" else {"stdin": subprocess.PIPE}
        self.proc = subprocess.Popen(self.cmd, shell=True, bufsize=0, **pipes)
        self.pipe = self.proc.stdout if mode == "rb" else self.proc.stdin
        self.checked = False

    def readable(self) -> bool:
        return self.mode == "rb"

    def writable(self) -> bool:
        return self.mode == "wb"

    def readinto(self, buffer: Any) -> int:
        count = self.pipe.readinto(buffer)
        if not count and len(buffer):
            self._check(self._wait())
        return count or 0

    def write(self, data: Any) -> int:
        try:
            return self.pipe.write(data)
        except BrokenPipeError as exn:
            self._check(self._wait())
            raise OpenError("command closed its input", url=self.url) from exn

    def _wait(self) -> int:
        """The command's exit status, waiting at most `timeout`; a command still running then is
        killed and reported as an OpenError naming it."""
        try:
            return self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.checked = True
            raise OpenError(f"command {self.cmd!r} still running after {self.timeout} s; killed",
                            url=self.url) from None

    def _check(self, status: int) -> None:
        if self.checked:
            return
        self.checked = True
        if status != 0:
            raise OpenError(f"command {self.cmd!r} exited with status {status}", url=self.url)

    def _stop_early(self) -> None:
        """Stop a command whose output is no longer read; dying of SIGPIPE or our SIGTERM is no error."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self._wait() in (141, 143, -13, -15):
            self.checked = True

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.pipe.close()
            if self.mode == "rb" and not self.checked:  # the reader stopped before the end of data
                self._stop_early()
            self._check(self._wait())
        finally:
            super().close()


def open_pipe(url: str, mode: str, bufsize: int = DEFAULT_BUFSIZE, timeout: float | None = None,
              **options: Any) -> IO[bytes]:
    """`pipe:CMD` as a buffered binary stream (see PipeStream)."""
    _check_mode(url, mode, ("rb", "wb"))
    _no_options(url, options)
    raw = PipeStream(url, mode, timeout=timeout)
    return io.BufferedReader(raw, bufsize) if mode == "rb" else io.BufferedWriter(raw, bufsize)


class HTTPStream(io.RawIOBase):
    """A streamed HTTP(S) GET. Connection errors, timeouts and 5xx/429 answers are retried `retries`
    times with exponential backoff from `backoff` seconds; a dropped stream is resumed at the current
    offset with a Range request (or by skipping, when the server ignores Range). 4xx is final.
    `offset` starts the body there (the same Range request); `size` is the whole body's length when
    the server says it (else None)."""

    def __init__(self, url: str, timeout: float = 60.0, retries: int = 3, backoff: float = 0.2,
                 headers: dict[str, str] | None = None, offset: int = 0):
        super().__init__()
        if retries < 0 or timeout <= 0 or offset < 0:
            raise ValueError(f"need retries >= 0, timeout > 0, offset >= 0, got {retries}, {timeout}, {offset}")
        self.url, self.timeout, self.retries, self.backoff = url, timeout, retries, backoff
        self.headers = dict(headers or {})
        self.offset = offset
        self.response = self._with_retries(self._connect)
        length = self.response.length
        self.size = None if length is None else offset + length

    def readable(self) -> bool:
        return True

    def _connect(self) -> http.client.HTTPResponse:
        import urllib.request

        headers = dict(self.headers)
        if self.offset:
            headers["Range"] = f"bytes={self.offset}-"
        request = urllib.request.Request(self.url, headers=headers)
        response = urllib.request.urlopen(request, timeout=self.timeout)
        if self.offset and response.status != 206:  # server ignored Range: skip what we already have
            _skip(response, self.offset)
        return response

    def _with_retries(self, action: Callable[[], Any]) -> Any:
        import http.client
        import urllib.error

        for attempt in range(self.retries + 1):
            try:
                return action()
            except urllib.error.HTTPError as exn:
                if exn.code not in _RETRY_STATUS or attempt == self.retries:
                    raise OpenError(f"HTTP status {exn.code} {exn.reason}", url=self.url) from exn
            except (OSError, http.client.HTTPException) as exn:
                if attempt == self.retries:
                    reason = getattr(exn, "reason", None) or exn
                    raise OpenError(f"HTTP request failed: {reason}", url=self.url) from exn
            time.sleep(self.backoff * 2**attempt)
        raise AssertionError("unreachable")

    def readinto(self, buffer: Any) -> int:
        import http.client

        for attempt in range(self.retries + 1):
            try:
                count = self.response.readinto(buffer)
                if count or not len(buffer) or not self.response.length:
                    break  # data, or the end of a complete body
                raise http.client.IncompleteRead(b"", self.response.length)  # connection dropped early
            except (OSError, http.client.HTTPException, socket.timeout) as exn:
                if attempt == self.retries:
                    raise OpenError(f"HTTP stream broke at byte {self.offset}: {exn!r}", url=self.url) from exn
                self.response.close()
                time.sleep(self.backoff * 2**attempt)
                self.response = self._with_retries(self._connect)
        self.offset += count
        return count

    def close(self) -> None:
        if not self.closed:
            self.response.close()
        super().close()


def _skip(response: http.client.HTTPResponse, count: int) -> None:
    while count > 0:
        chunk = response.read(min(count, DEFAULT_BUFSIZE))
        if not chunk:
            raise OSError("stream ended while skipping to the resume offset")
        count -= len(chunk)


def open_http(url: str, mode: str, bufsize: int = DEFAULT_BUFSIZE, timeout: float = 60.0,
              retries: int = 3, backoff: float = 0.2, headers: dict[str, str] | None = None,
              offset: int = 0, **options: Any) -> IO[bytes]:
    """http(s):// for reading, streamed from byte `offset` (see HTTPStream; `.raw.size` is the whole
    body's length when known); 404 and other 4xx raise OpenError at once."""
    _check_mode(url, mode, ("rb",))
    _no_options(url, options)
    raw = HTTPStream(url, timeout=timeout, retries=retries, backoff=backoff, headers=headers, offset=offset)
    return io.BufferedReader(raw, bufsize)


def open_fsspec(url: str, mode: str, bufsize: int = DEFAULT_BUFSIZE, **options: Any) -> IO[bytes]:
    """Any fsspec protocol (s3://, gs://, memory://, ...); `options` go to the filesystem.

    For s3:// an endpoint (moto, MinIO, ...) comes from `endpoint_url=` or settings.s3_endpoint_url().
    `bufsize` is not used: the filesystem buffers itself (pass its `block_size=` option to change it).
    """
    _check_mode(url, mode, ("rb", "wb"))
    try:
        import fsspec
    except ImportError as exn:
        raise OpenError("fsspec is needed for this URL: pip install tensorcom[s3]", url=url) from exn
    protocol = url.split("://", 1)[0].lower()
    if protocol in ("s3", "s3a"):
        endpoint = options.pop("endpoint_url", None) or settings.s3_endpoint_url()
        if endpoint:
            client = dict(options.pop("client_kwargs", None) or {})
            client.setdefault("endpoint_url", endpoint)
            options["client_kwargs"] = client
    try:
        return fsspec.open(url, mode, **options).open()
    except Exception as exn:  # OSError, and botocore / gcsfs errors that are not OSError
        raise OpenError(f"{type(exn).__name__}: {exn}", url=url) from exn


SCHEMES: dict[str, Callable[..., IO[bytes]]] = {  # scheme_of(url) -> opener; fsspec for the rest
    "-": open_stdio,
    "pipe": open_pipe,
    "file": open_local,
    "http": open_http,
    "https": open_http,
}


def opener(url: str) -> Callable[..., IO[bytes]]:
    """The function that opens `url`, `(url, mode, **options) -> stream`: its scheme's in SCHEMES,
    else fsspec's."""
    return SCHEMES.get(scheme_of(url), open_fsspec)


def scheme_of(url: str) -> str:
    """'pipe', '-', 'file' (also for plain paths), or the URL's scheme lower-cased."""
    if url == "-":
        return "-"
    if url.startswith("pipe:"):
        return "pipe"
    match = _SCHEME.match(url)
    return match.group(1).lower() if match else "file"
