"""A restarted consumer catching up inside a live zshare stream (tensorcom.transport.sharing.catch_up
and the share book that follows it), without sockets: items in, sends out."""

from __future__ import annotations

from tensorcom.rates import consumer_lines
from tensorcom.transport.sharing import Item, ShareBook, SplitBook
from tensorcom.transport.sharing.catch_up import CatchUp, Regenerate, latest

STREAM = "serve-test"


class Served:
    """The items of a served stream of `workers` portions taking turns, `per` batches each per epoch."""

    def __init__(self, workers: int = 2, per: int = 6):
        self.workers, self.per = workers, per
        self.index = self.epoch = self.pos = 0
        self.order = [(v, i) for i in range(per) for v in range(workers)]

    def made(self, epoch: int, v: int, i: int, index: int = -1) -> Item:
        """Batch i of portion v of `epoch` (index -1: made again for a consumer)."""
        return Item(index, epoch, self.pos, frames=[name(epoch, v, i)], samples=1,
                    portion=(STREAM, v, self.workers, i))

    def items(self):
        """The stream's items, epoch after epoch (the end after each epoch's batches)."""
        while True:
            for v, i in self.order:
                item = self.made(self.epoch, v, i, self.index)
                self.index, self.pos = self.index + 1, self.pos + 1
                yield item
            yield Item(self.index, self.epoch, self.pos)
            self.index, self.epoch, self.pos = self.index + 1, self.epoch + 1, 0


def name(epoch, v, i):
    return f"e{epoch}v{v}i{i}"


def record(epoch, taken, workers=2, stream=STREAM):
    """A version-2 consumer state: `taken` maps (epoch, v) to intervals."""
    shares = [{"epoch": e, "worker": v, "batches": sum(b - a for a, b in t), "samples": 0, "ended": False,
               "taken": [list(pair) for pair in t]} for (e, v), t in sorted(taken.items())]
    return {"version": 2, "passes": epoch, "streams": {stream: {"workers": workers, "epoch": epoch, "shares": shares}}}


def pump(book, items, count, got, served=None, until=None):
    """Add up to `count` items while the book takes them, sending and acknowledging everything
    after each (and answering regenerations from `served`); `got[peer]`: names received, "END" for ends."""
    for _ in range(count):
        deliver(book, got, served)
        if until is not None and until():
            return
        if book.can_take():
            book.add(next(items))
    deliver(book, got, served)


def deliver(book, got, served):
    while True:
        for ask in book.take_regenerations():
            for i in ask.indices:
                book.regenerated(served.made(ask.epoch, ask.portion, i))
        sends = book.sends()
        if not sends:
            return
        for s in sends:
            got.setdefault(s.peer, []).append(s.item.frames[0] if s.item.frames else f"END{s.item.epoch}")
            book.ack(s.peer, s.number)


def epoch_names(epoch, workers=2, per=6):
    return {name(epoch, v, i) for v in range(workers) for i in range(per)}


def per_portion(names, epoch, v):
    return [n for n in names if n.startswith(f"e{epoch}v{v}i")]


def taken_names(taken):
    return {name(e, v, i) for (e, v), t in taken.items() for a, b in t for i in range(a, b)}


def check_restarted(got_after, taken, epochs, workers=2, per=6):
    """What the restarted consumer got plus what it had taken is each of `epochs` once, and it got
    each portion's batches in index order."""
    had = taken_names(taken)
    batches = [n for n in got_after if not n.startswith("END")]
    assert len(batches) == len(set(batches)) and not had & set(batches)
    for e in epochs:
        assert epoch_names(e, workers, per) <= had | set(batches)
        for v in range(workers):
            indices = [int(n.split("i")[1]) for n in per_portion(batches, e, v)]
            assert indices == sorted(indices)


def test_within_the_replay_buffer_the_missing_batches_come_from_it():
    book, served = ShareBook(replay=32), Served()
    items, got = served.items(), {}
    book.join("a", "a", 4)
    pump(book, items, 8, got)  # 4 batches of each portion
    taken = {(0, 0): [(0, 2)], (0, 1): [(0, 1)]}
    welcome = book.join("x", "x", 2, record=record(0, taken))
    assert (welcome.epoch, book.take_regenerations()) == (0, [])
    pump(book, items, 20, got)
    check_restarted(got["x"], taken, [0])
    assert got["x"][:5] == ["e0v0i2", "e0v0i3", "e0v1i1", "e0v1i2", "e0v1i3"]  # then live
    assert got["x"].index("END0") == 12 - 3  # the epoch's end after every batch of it
    assert epoch_names(0) <= set(got["a"]) and got["a"].count("END0") == 1


def test_beyond_the_replay_buffer_the_missing_batches_are_regenerated():
    book, served = ShareBook(replay=2), Served()
    items, got = served.items(), {}
    book.join("a", "a", 4)
    pump(book, items, 9, got)
    taken = {(0, 0): [(0, 1)], (0, 1): [(0, 1)]}
    book.join("x", "x", 2, record=record(0, taken))
    asks = book.take_regenerations()
    assert asks == [Regenerate(STREAM, 0, 0, 2, (1, 2, 3)), Regenerate(STREAM, 0, 1, 2, (1, 2))]  # 3 of v1 buffered
    book.regenerations = asks  # answered by pump's deliver
    pump(book, items, 20, got, served)
    check_restarted(got["x"], taken, [0, 1])
    assert got["x"].count("END0") == 1 and got["a"].count("END0") == 1


def test_holes_in_what_was_taken_are_filled_and_nothing_taken_comes_again():
    book, served = ShareBook(replay=2), Served()
    items, got = served.items(), {}
    book.join("a", "a", 4)
    pump(book, items, 10, got)
    taken = {(0, 0): [(0, 1), (2, 4)], (0, 1): [(1, 2)]}  # a zsplit-style record: not a prefix
    book.join("x", "x", 2, record=record(0, taken))
    assert [a.indices for a in book.regenerations] == [(1,), (0, 2, 3)]
    pump(book, items, 20, got, served)
    check_restarted(got["x"], taken, [0])


def test_a_consumer_epochs_behind_gets_the_rest_of_each_with_its_end():
    book, served = ShareBook(replay=3), Served(per=3)
    items, got = served.items(), {}
    book.join("a", "a", 4)
    pump(book, items, 9, got)  # epoch 0 (6 batches and its end), 2 batches of epoch 1
    taken = {(0, 0): [(0, 2)]}
    book.join("x", "x", 2, record=record(0, taken))
    pump(book, items, 12, got, served)
    check_restarted(got["x"], taken, [0, 1], per=3)
    ends = [n for n in got["x"] if n.startswith("END")]
    assert ends[:2] == ["END0", "END1"]
    assert all(n.startswith("e1") or n.startswith("END") for n in got["x"][got["x"].index("END0") + 1:
                                                                           got["x"].index("END1")])


def test_catching_up_does_not_hold_the_others_and_loses_nothing_live():
    book, served = ShareBook(replay=2), Served(per=8)
    items, got = served.items(), {}
    book.join("a", "a", 4)
    pump(book, items, 4, got)
    taken = {(0, 0): [(0, 1)]}
    book.join("x", "x", 1, record=record(0, taken))
    kept = book.take_regenerations()  # not answered yet: x stays catching up
    pump(book, items, 12, got)
    assert len(got["a"]) >= 14 and book.consumers["x"].catching > 0  # a went on
    report = {r["name"]: r["catching_up"] for r in book.reports()}
    assert report["a"] == 0 and report["x"] == book.catch_up.remaining("x") > 0
    lines = consumer_lines(book.reports())  # what tensormon --consumers and the server tools print
    assert "catching up" not in lines[0] and f"catching up {report['x']}," in lines[1]
    book.regenerations = kept
    pump(book, items, 20, got, served)
    check_restarted(got["x"], taken, [0], per=8)
    assert book.consumers["x"].catching is None


def test_a_record_of_another_stream_or_shape_is_a_plain_join():
    book, served = ShareBook(replay=4), Served()
    items, got = served.items(), {}
    book.join("a", "a", 4)
    pump(book, items, 3, got)
    book.join("x", "x", 2, record=record(0, {}, stream="serve-other"))
    book.join("y", "y", 2, record=record(0, {}, workers=3))
    book.join("z", "z", 2, record={"version": 1, "passes": 0, "streams": {}})
    bad = record(0, {(0, 0): [(0, 1)]})
    bad["streams"][STREAM]["shares"][0]["taken"] = "nonsense"  # a malformed record does not stop the server
    book.join("w", "w", 2, record=bad)
    book.join("v", "v", 2, record={"streams": [STREAM]})
    assert book.take_regenerations() == []
    assert all(book.consumers[p].catching is None for p in "xyzwv")


def test_the_core_reads_version_1_records_as_prefixes():
    core, served = CatchUp(), Served()
    items = served.items()
    for _ in range(6):
        core.passing(next(items))
    state = {"version": 1, "passes": 0, "streams": {STREAM: {"workers": 2, "epoch": 0, "shares": [
        {"epoch": 0, "worker": 1, "batches": 2, "samples": 2, "ended": False}]}}}
    asks = core.join("x", state, [], 6, 0)
    assert asks == [Regenerate(STREAM, 0, 0, 2, (0, 1, 2)), Regenerate(STREAM, 0, 1, 2, (2,))]
    assert core.remaining("x") == 4


def taken_of(names):
    """A record's taken intervals for the batch names `names` (single-index intervals)."""
    taken = {}
    for n in names:
        e, rest = n[1:].split("v")
        v, i = map(int, rest.split("i"))
        taken.setdefault((int(e), v), []).append((i, i + 1))
    return {key: sorted(t) for key, t in taken.items()}


def test_a_restarted_zsplit_rank_gets_what_it_used_after_its_checkpoint_and_the_job_every_batch_once():
    book, served = SplitBook(), Served()
    items, got = served.items(), {}
    for peer in ("a", "b", "x"):
        book.join(peer, peer, 1)
    pump(book, items, 6, got)
    checkpoint = list(got["x"])  # the job's checkpoint: what x had used then
    pump(book, items, 3, got)
    used_after = got["x"][len(checkpoint):]
    assert used_after  # x used batches after its checkpoint, then it was killed
    book.disconnect("x", 0.0, quiet=False)
    assert book.expire(100.0, 1.0) == ["x"]
    book.join("y", "y", 1, record=record(0, taken_of(checkpoint)))
    asks = book.take_regenerations()
    assert sorted(name(a.epoch, a.portion, i) for a in asks for i in a.indices) == sorted(used_after)
    assert {r["name"]: r["catching_up"] for r in book.reports()}["y"] == len(used_after)
    book.regenerations = asks
    pump(book, items, 12, got, served)
    job = [n for peer in "aby" for n in got.get(peer, []) if n.startswith("e0")] + checkpoint
    assert sorted(job) == sorted(epoch_names(0)) and all(got[p].count("END0") == 1 for p in "aby")
    assert set(used_after) <= set(got["y"])


def test_a_rank_restarted_while_its_epoch_closes_gets_that_end_after_its_batches():
    book, served = SplitBook(), Served(per=3)
    items, got = served.items(), {}
    book.join("a", "a", 1)
    book.join("x", "x", 1)
    for _ in range(7):  # epoch 0 (6 batches) and its end, which waits for every batch's acknowledgement
        book.add(next(items))
    for acked in ({"a", "x"}, {"a", "x"}, {"a"}):  # x acknowledges two batches, dies holding its third
        for s in book.sends():
            got.setdefault(s.peer, []).append(s.item.frames[0])
            if s.peer in acked:
                book.ack(s.peer, s.number)
    book.disconnect("x", 0.0, quiet=False)
    book.expire(100.0, 1.0)
    book.join("y", "y", 1, record=record(0, taken_of(got["x"][:1])))
    book.regenerations = asks = book.take_regenerations()
    assert [(a.portion, a.indices) for a in asks] == [(1, (1,))]  # x's second batch, used after its checkpoint
    deliver(book, got, served)
    assert got["y"][-1] == "END0" and got["y"].count("END0") == 1
    job = [n for p in "ay" for n in got[p] if n.startswith("e0")] + got["x"][:1]
    assert sorted(job) == sorted(epoch_names(0, per=3))


def test_batches_that_cannot_be_made_again_are_given_up_and_counted():
    book, served = ShareBook(replay=2), Served()
    items, got = served.items(), {}
    book.join("a", "a", 4)
    pump(book, items, 8, got)
    book.join("x", "x", 2, record=record(0, {(0, 0): [(0, 1)], (0, 1): [(0, 1)]}))
    asks = book.take_regenerations()
    book.give_up(asks)  # no catch-up worker (or it failed)
    pump(book, items, 10, got)
    lacking = {name(a.epoch, a.portion, i) for a in asks for i in a.indices}
    assert book.lost_batches == len(lacking) > 0 and book.consumers["x"].catching is None
    assert not lacking & set(got["x"]) and epoch_names(0) - lacking - {"e0v0i0", "e0v1i0"} <= set(got["x"])


def test_it_catches_up_from_the_epoch_it_was_in_not_from_the_partial_first_one_it_joined():
    book, served = ShareBook(replay=4), Served(per=3)
    items, got = served.items(), {}
    book.join("a", "a", 4)
    pump(book, items, 10, got)  # epoch 0 and 3 batches of epoch 1
    taken = {(0, 0): [(1, 3)], (0, 1): [(2, 3)], (1, 0): [(0, 1)]}  # it joined epoch 0 late, then took epoch 1's first
    book.join("x", "x", 2, record=record(0, taken))
    pump(book, items, 10, got, served)
    assert not any(n.startswith("e0") or n == "END0" for n in got["x"])
    check_restarted(got["x"], {k: t for k, t in taken.items() if k[0] == 1}, [1], per=3)


def test_the_record_a_restarted_consumer_sends_is_its_latest_epoch_only():
    taken = {(e, v): [(0, 20)] for e in range(50) for v in range(2)}
    taken.update({(50, 0): [(0, 3)], (50, 1): []})
    full = record(0, taken)
    sent = latest(full)
    assert [(s["epoch"], s["worker"]) for s in sent["streams"][STREAM]["shares"]] == [(50, 0), (50, 1)]
    assert sent["streams"][STREAM]["epoch"] == 50 and sent["passes"] == full["passes"]
    core, served = CatchUp(), Served(per=5)
    items = served.items()
    for _ in range(4):
        core.passing(next(items))
    assert core.join("x", sent, [], 4, 0) is None  # a record of a later epoch than the stream's: a plain join
