"""The sharing protocol: `zshare://` and `zsplit://` servers, `zjoin://` consumers (docs/sharing.md;
the wire protocol: docs/protocol.md §7). Its modules, each one concept:

    books      who gets which batch, and when (ShareBook, SplitBook, make_book); pure, no zmq
    server     ShareServer: the thread that owns the ROUTER socket and follows a book (+ _input: its
               input socket, the stream it serves)
    joiner     Joiner: the consumer side, one DEALER socket per server (+ _session: its session core)
    hub        Hub: a ShareServer fed by serving worker processes (tensorcom.serve, tensorcom.ray)
    control    the control frame that starts every message of the protocol (kind and fields <-> bytes)
    handoff    batches handed to consumers on the server's host through POSIX shared memory

`Connection` reaches these through its sharing ends (tensorcom.transport.ends.sharing). The books'
names are imported here eagerly (they need no ZeroMQ); the socket-owning ones on first use.
"""

from __future__ import annotations

from tensorcom.lazy import lazy_names
from tensorcom.transport.sharing.books import (
    MAX_DEPARTED,
    Consumer,
    Item,
    Send,
    ShareBook,
    SplitBook,
    Welcome,
    make_book,
)

# the socket-owning names, imported on first use
_LAZY = {name: f"tensorcom.transport.sharing.{module}" for name, module in
         (("Hub", "hub"), ("Joiner", "joiner"), ("ShareServer", "server"), ("check_delivered", "server"))}
__all__ = sorted(["MAX_DEPARTED", "Consumer", "Item", "Send", "ShareBook", "SplitBook", "Welcome",
                  "make_book", *_LAZY])

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
