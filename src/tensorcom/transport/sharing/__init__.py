"""The sharing protocol: `zshare://` / `zsplit://` servers and `zjoin://` consumers.

    books      who gets which batch (ShareBook, SplitBook, make_book): the delivery rules, pure
    handoff    shared-memory handoff of batches to consumers on the server's host

The books' names are importable from here (`from tensorcom.transport.sharing import make_book`).
"""

from __future__ import annotations

from tensorcom.transport.sharing.books import (
    MAX_DEPARTED,
    Consumer,
    Item,
    Send,
    ShareBook,
    SplitBook,
    Welcome,
    check_positive,
    make_book,
)

__all__ = ["MAX_DEPARTED", "Consumer", "Item", "Send", "ShareBook", "SplitBook", "Welcome", "check_positive",
           "make_book"]
