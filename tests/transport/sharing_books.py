"""Streams of items for the book tests (test_sharing_book.py, test_sharing_session.py)."""

from __future__ import annotations

from tensorcom.transport.sharing import Item


class Stream:
    """Makes the items of a stream: `batches(n)` then `end()`, epoch after epoch."""

    def __init__(self):
        self.index = self.epoch = self.pos = 0

    def batch(self) -> Item:
        item = Item(self.index, self.epoch, self.pos, frames=[f"b{self.epoch}.{self.pos}"], samples=2)
        self.index, self.pos = self.index + 1, self.pos + 1
        return item

    def end(self) -> Item:
        item = Item(self.index, self.epoch, self.pos)
        self.index, self.epoch, self.pos = self.index + 1, self.epoch + 1, 0
        return item


def feed(book, stream, items):
    """Add `items` ("b" batch, "e" end) while the book takes them; returns how many were added."""
    added = 0
    for kind in items:
        if not book.can_take():
            break
        book.add(stream.batch() if kind == "b" else stream.end())
        added += 1
    return added
