"""A sharing server fed by serving worker processes: what `tensorcom.serve(pipeline, "zshare://…")`
runs in its own process.

    hub = Hub("zshare://127.0.0.1:7880", min_consumers=2)
    hub.worker_url            # "zpush+ipc:///tmp/tc-hub-…/in": every worker connects a Connection here
    ...                       # the N workers send their portions, one marker group of N per epoch
    hub.finish(ends=epochs)   # the stream ends once that many epochs have ended
    result = hub.close()      # waits until every consumer has everything (ShareServer.wait's result)

The workers' batches are forwarded as they arrive (one encoding for all consumers); their markers are
counted, so each epoch ends once for the consumers, after the last worker's marker.

Workers on other machines (tensorcom.ray's actors): `Hub(url, input_host="10.0.0.5")` binds the input
on tcp, that host, a port of the system's choosing (`worker_url` "zpush://10.0.0.5:PORT"); and
`hub.server.handover(stream, i, n)` gives portion i to a restarted worker, which skips what was taken.
The input is not authenticated: bind it on a network only the cluster reaches.

Consumers catching up (a restarted job, tensorcom.transport.sharing.catch_up): `hub.server.catch_up`
is the serving layer's hook that makes lacking batches again (tensorcom.pipeline.catch_up); its
worker sends them to the server's catch-up input (`hub.server.catch_up_address`, beside the input)
through a `CatchUpFeed`, each behind a control frame `regenerated` saying which batch it is, and the
server routes them to the consumers that lack them only.
`hub.catch_up` (any object with close()) is closed with the hub.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from tensorcom import urls, wire
from tensorcom.transport import _sockets as sockets
from tensorcom.transport import security
from tensorcom.transport.batches import prepare_batch
from tensorcom.transport.sharing import control
from tensorcom.transport.sharing.server import ShareServer

INPUT_HWM = 4  # worker messages queued in the hub before workers wait


def sharing_mode(endpoints: list) -> str:
    """"share" or "split" for binding zshare / zsplit endpoints (all of one scheme); ValueError else."""
    schemes = {e.scheme for e in endpoints}
    if not schemes <= {"zshare", "zsplit"} or len(schemes) != 1:
        raise ValueError(f"a sharing server binds zshare:// or zsplit:// URLs, one scheme at a time, got "
                         f"{[e.url for e in endpoints]}")
    return "share" if schemes == {"zshare"} else "split"


class Hub:
    """A ShareServer bound to `url` (zshare/zsplit, brace-expanded) whose input is an ipc socket that
    serving workers push to, or with `input_host` a tcp socket on that host (any free port);
    `curve`: a security.Curve for its consumers (default: $TENSORCOM_CURVE_*).
    `options`: ShareServer's (min_consumers, replay, policy, liveness)."""

    def __init__(self, url: Any, curve: Any = None, input_host: str | None = None, **options: Any):
        endpoints = urls.parse_all(url)
        self._releases: list = []
        self._curve = curve if curve is not None else security.curve_from(serving=True)
        mode = sharing_mode(endpoints)
        for endpoint in endpoints:  # before anything is opened (a warning may be made an error)
            security.warn_if_exposed(endpoint, self._curve)
        self._dir = None if input_host else tempfile.mkdtemp(prefix="tc-hub-", dir="/tmp")
        address = f"tcp://{input_host}:*" if input_host else f"ipc://{os.path.join(self._dir, 'in')}"
        self._finisher = None
        self.catch_up: Any = None  # the serving layer's catch-up worker, closed with the hub
        self._context = sockets.acquire_context()
        try:
            self.server = ShareServer(endpoints, mode, address, context=self._context, input_hwm=INPUT_HWM,
                                      secure=self._secure, **options)
        except BaseException:
            self._release()
            raise
        bound = self.server.input_address
        self.worker_url = f"zpush://{input_host}:{bound.rsplit(':', 1)[1]}" if input_host else f"zpush+{bound}"
        self.server.start()

    @property
    def addresses(self) -> list[str]:
        return self.server.addresses

    def finish(self, ends: int | None = None) -> None:
        """End the stream once `ends` epochs have ended (None: after what has arrived)."""
        self._finisher = sockets.make_socket(self._context, "PUSH", sndhwm=1000, rcvhwm=1000, timeout=None,
                                             max_message_size=None)
        self._finisher.linger = 1000
        self._finisher.connect(self.server.input_address)
        fields = {} if ends is None else {"ends": ends}
        self._finisher.send(control.encode("finish", **fields))

    def close(self, timeout: float | None = None) -> dict:
        """Wait (at most `timeout` s) until the consumers have everything, then release; the result
        of ShareServer.wait (with "regenerated": the batches its catch-up worker made again, when it
        has one). After an abort() the result counts what was not delivered."""
        try:
            result = self.server.wait(timeout)
            return result if self.catch_up is None else {**result, "regenerated": self.catch_up.made}
        finally:
            self._release()

    def abort(self) -> dict:
        """Stop at once (a worker failed, Ctrl-C); returns what was not delivered."""
        self.server.stop.set()
        return self.close()

    def _secure(self, sock: Any) -> None:
        self._releases.append(security.secure(sock, self._curve, serving=True))

    def _release(self) -> None:
        if self.catch_up is not None:
            self.catch_up.close()
            self.catch_up = None
        for release in self._releases:
            release()
        self._releases = []
        if self._finisher is not None:
            self._finisher.close()
            self._finisher = None
        if self._context is not None:
            sockets.release_context()
            self._context = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


class CatchUpFeed:
    """The catch-up worker's way into a hub (`address`: its server's `catch_up_address`): batches
    made again for consumers catching up. `send(ask, index, batch)` sends batch `index` of the
    portion and epoch a catch_up.Regenerate names; close() waits (at most `linger` s) for them to leave."""

    def __init__(self, address: str):
        self._context = sockets.acquire_context()
        self.sock = sockets.make_socket(self._context, "PUSH", sndhwm=INPUT_HWM, rcvhwm=INPUT_HWM, timeout=None,
                                        max_message_size=None)
        self.sock.connect(address)

    def send(self, ask: Any, index: int, batch: Any) -> None:
        portion = wire.Portion(ask.stream, ask.portion, ask.workers)
        frames = wire.encode_batch(prepare_batch(batch, True), epoch=ask.epoch, portion=portion, index=index)
        head = control.encode("regenerated", stream=ask.stream, epoch=ask.epoch, worker=ask.portion,
                              workers=ask.workers, index=index)
        self.sock.send_multipart([head, *frames], copy=False)

    def close(self, linger: float = 10.0) -> None:
        if self.sock is not None:
            self.sock.close(linger=int(linger * 1000))
            self.sock = None
            sockets.release_context()
