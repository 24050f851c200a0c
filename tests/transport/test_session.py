"""Sessions of the plain schemes without sockets: the sender's SendLog (what is kept, confirmed,
provably lost and resent, given up) and the receiver's Arrivals (duplicates, the floor, what to
confirm), then both joined by a simulated network whose connections drop and come back."""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field

import pytest

from tensorcom.transport.session import MAX_SENDS, Arrivals, SendLog


def log_with(*keys, receivers=(), connections=1, **limits) -> SendLog:
    """A SendLog that transmitted one message per key (tx 0, 1, ...) with `receivers` attached."""
    log = SendLog(**limits)
    log.connections = connections
    for receiver in receivers:
        log.attach(receiver)
    for key in keys:
        log.transmit(key, [b"frame"], 10)
    return log


def batches(n: int) -> list[tuple]:
    return [("batch", seq) for seq in range(n)]


# ---- SendLog: keeping and confirming ---------------------------------------------------------------


def test_transmit_numbers_transmissions_and_keeps_each_message_until_confirmed():
    log = SendLog()
    assert [log.transmit(key, [b"x"], 5) for key in batches(3)] == [0, 1, 2]
    assert log.outstanding() == 3 and log.nbytes == 15 and log.tx == 3
    log.confirm("r", [0, 2], 2)
    assert list(log.entries) == [("batch", 1)] and log.nbytes == 5
    assert log.receivers == {"r": 2}  # confirming attaches


def test_confirm_ignores_unknown_and_repeated_transmissions_and_keeps_the_highest_seen():
    log = log_with(*batches(2), receivers=["r"])
    log.confirm("r", [1], 1)
    log.confirm("r", [1, 99], 0)  # a repeated ack, a tx never sent, an older high
    assert list(log.entries) == [("batch", 0)] and log.nbytes == 10
    assert log.receivers["r"] == 1


def test_outstanding_counts_by_kind():
    log = log_with(*batches(2), ("marker", 2))
    assert (log.outstanding(), log.outstanding("batch"), log.outstanding("marker")) == (3, 2, 1)


def test_full_by_messages_or_bytes_and_room_after_a_confirmation():
    log = log_with(*batches(2), max_messages=2)
    assert log.full
    log.confirm("r", [0], 0)
    assert not log.full
    by_bytes = log_with(*batches(3), max_bytes=30)
    assert by_bytes.full and not log_with(*batches(2), max_bytes=30).full


def test_drop_oldest_stops_keeping_the_first_sent_and_counts_it():
    log = log_with(*batches(3))
    log.drop_oldest()
    assert list(log.entries) == [("batch", 1), ("batch", 2)] and log.abandoned == 1 and log.nbytes == 20
    log.confirm("r", [0], 2)  # a late confirmation of what was dropped changes nothing
    assert log.outstanding() == 2 and log.abandoned == 1


def test_floor_is_the_lowest_unconfirmed_batch_or_the_next_seq():
    log = log_with(("batch", 5), ("batch", 6), ("marker", 7))
    assert log.floor(7) == 5
    log.confirm("r", [0], 0)
    assert log.floor(7) == 6
    log.confirm("r", [1], 1)
    assert log.floor(7) == 7  # a marker does not hold the floor back
    assert SendLog().floor(12) == 12


# ---- SendLog: the resend rule ----------------------------------------------------------------------


def test_a_transmission_is_lost_once_its_receiver_saw_a_later_one_and_did_not_confirm_it():
    log = log_with(*batches(3), receivers=["r"])
    log.confirm("r", [], 0)
    assert log.lost() == []  # tx 1 and 2 may still be on their way
    log.confirm("r", [2], 2)  # tx 2 came, not tx 0 and 1: the connection they were on dropped
    assert [entry.key for entry in log.lost()] == [("batch", 0), ("batch", 1)]
    log.confirm("r", [1], 2)
    assert [entry.key for entry in log.lost()] == [("batch", 0)]


def test_nothing_is_provable_before_a_receiver_attached():
    log = log_with(*batches(2))
    assert not log.vouched and log.lost() == []


def test_a_message_sent_before_a_receiver_attached_is_proven_lost_once_settled():
    log = log_with(("batch", 0))  # sent while no receiver had said hello
    log.transmit(("batch", 1), [b"x"], 10)
    log.confirm("late", [1], 1)  # the only connection's receiver never took tx 0 ... or another one did
    assert log.lost() == [] and [entry.key for entry in log.stuck()] == [("batch", 0)]
    assert not log.settle(0) and log.settle(1)  # a liveness window later: whoever took it has spoken
    assert [entry.key for entry in log.lost()] == [("batch", 0)] and log.stuck() == []


def test_a_lost_message_resent_then_lost_again_is_resent_again():
    log = log_with(("batch", 0), ("batch", 1), receivers=["r"])
    log.confirm("r", [1], 1)
    (entry,) = log.lost()
    assert log.transmit(entry.key, [b"again"], 10) == 2 and log.resent == 1
    assert log.lost() == []  # tx 2 is on its way
    log.transmit(("batch", 2), [b"x"], 10)
    log.confirm("r", [3], 3)  # tx 2 was lost too
    (again,) = log.lost()
    assert again.key == ("batch", 0) and again.sends == 2 and again.frames == [b"again"]


def test_a_suspect_goes_alone():
    log = log_with(*batches(3), receivers=["r"])
    log.confirm("r", [2], 2)
    for entry in log.lost():  # batches 0 and 1: first losses, resent together (tx 3, 4)
        log.transmit(entry.key, entry.frames, entry.nbytes)
    log.transmit(("batch", 3), [b"x"], 10)
    log.confirm("r", [5], 5)  # both resends lost: each is now suspect
    assert [(entry.key, entry.sends) for entry in log.lost()] == [(("batch", 0), 2)]
    log.transmit(("batch", 0), [b"x"], 10)
    log.confirm("r", [6], 6)
    assert [(entry.key, entry.sends) for entry in log.lost()] == [(("batch", 1), 2)]


def lose(log: SendLog, key: tuple, times: int) -> None:
    """Transmit `key` `times` times in all, each transmission lost (the receiver confirms a later tick)."""
    for attempt in range(times):
        if attempt:
            (entry,) = log.lost()
            log.transmit(entry.key, entry.frames, entry.nbytes)
        log.confirm("r", [], log.tx)
        log.tx += 1


def test_a_message_lost_max_sends_times_is_given_up_and_counted_refused():
    log = log_with(("batch", 0), receivers=["r"])
    log.tx = 1
    lose(log, ("batch", 0), MAX_SENDS)
    assert log.entries[("batch", 0)].sends == MAX_SENDS
    assert log.lost() == []
    assert log.outstanding() == 0 and log.refused == 1 and log.abandoned == 1 and log.nbytes == 0
    assert log.by_tx == {}


def test_a_marker_given_up_is_not_a_refused_batch():
    log = log_with(("marker", 0), receivers=["r"])
    log.tx = 1
    lose(log, ("marker", 0), MAX_SENDS)
    assert log.lost() == [] and log.outstanding() == 0 and log.refused == 0 and log.abandoned == 1


def test_a_message_lost_fewer_than_max_sends_times_is_still_resent():
    log = log_with(("batch", 0), receivers=["r"])
    log.tx = 1
    lose(log, ("batch", 0), MAX_SENDS - 1)
    (entry,) = log.lost()
    assert entry.sends == MAX_SENDS - 1 and log.refused == 0


def test_two_receivers_round_robin_prove_nothing_until_both_saw_later():
    log = log_with(*batches(4), receivers=["a", "b"], connections=2)  # tx 0, 2 -> a; tx 1, 3 -> b
    log.confirm("a", [0], 0)  # a's connection dropped with tx 2 on it
    log.confirm("b", [1, 3], 3)
    assert log.lost() == []  # a has seen nothing after tx 2: it may still come
    log.transmit(("batch", 4), [b"x"], 10)
    log.confirm("a", [4], 4)  # a reconnected and took tx 4
    assert [entry.key for entry in log.lost()] == [("batch", 2)]


def test_a_receiver_that_detaches_unblocks_the_proof():
    log = log_with(*batches(4), receivers=["a", "b"], connections=2)
    log.confirm("a", [0], 0)
    log.confirm("b", [1, 3], 3)
    assert log.lost() == []
    log.detach("a")  # a said bye (or stayed away past the liveness window): its connection is gone
    assert log.lost() == []  # ... but until the monitor says so, a connection may have no receiver
    log.connections = 1
    assert [entry.key for entry in log.lost()] == [("batch", 2)]


def test_a_non_confirming_peer_makes_nothing_provable():
    log = log_with(*batches(3), receivers=["v2"], connections=2)  # one data connection is a 0.1 receiver's
    log.confirm("v2", [1], 2)
    assert not log.vouched and log.lost() == []
    log.connections = 1  # the 0.1 receiver left: it may have taken batch 0 (never resent), or not
    assert log.vouched and log.lost() == [] and [entry.key for entry in log.stuck()] == [("batch", 0)]
    log.transmit(("batch", 3), [b"x"], 10)  # sent while every connection has a confirming receiver
    log.transmit(("batch", 4), [b"x"], 10)
    log.confirm("v2", [4], 4)
    assert [entry.key for entry in log.lost()] == [("batch", 3)]
    log.settle(3)  # the 0.1 receiver, if it took them, took them for good: a window later they count lost
    assert [entry.key for entry in log.lost()] == [("batch", 0), ("batch", 2), ("batch", 3)]


# ---- Arrivals --------------------------------------------------------------------------------------


def test_arrivals_drop_a_batch_taken_before_and_confirm_every_transmission():
    arrivals = Arrivals()
    assert arrivals.arrive(0, 0, 0) and arrivals.arrive(1, 0, 1)
    assert not arrivals.arrive(0, 0, 5)  # a resend of batch 0
    assert arrivals.duplicates == 1
    assert arrivals.take() == ([0, 1, 5], 5)


def test_arrivals_forget_below_the_floor_and_refuse_what_is_below_it():
    arrivals = Arrivals()
    for seq in range(4):
        arrivals.arrive(seq, 0, seq)
    arrivals.arrive(4, 3, 4)
    assert arrivals.floor == 3 and set(arrivals.seen) == {3, 4}
    assert not arrivals.arrive(1, 3, 5)  # below the floor: every receiver's copy was confirmed
    assert arrivals.arrive(5, 2, 6) and arrivals.floor == 3  # an older floor (reordered) never lowers it
    assert arrivals.duplicates == 1


def test_arrivals_take_markers_and_ticks_every_time():
    arrivals = Arrivals()
    assert arrivals.arrive(None, 0, 0) and arrivals.arrive(None, 0, 1)
    assert not arrivals.seen and arrivals.duplicates == 0
    assert arrivals.take() == ([0, 1], 1)


def test_take_repeats_taken_batches_until_the_floor_passes_them_and_markers_once():
    arrivals = Arrivals()
    arrivals.arrive(0, 0, 7)
    arrivals.arrive(1, 0, 3)  # transmissions of different connections arrive out of order
    arrivals.arrive(None, 0, 8)  # a marker
    assert arrivals.take() == ([7, 3, 8], 8) and not arrivals.owed
    assert arrivals.take() == ([7, 3], 8)  # cumulative: an ack lost with its link is repeated
    arrivals.arrive(None, 1, 9)  # a tick: the sender's floor passed batch 0
    assert arrivals.take() == ([3, 9], 9) and arrivals.high == 9


def test_a_floor_told_over_the_link_forgets_what_is_below_it_and_never_goes_down():
    arrivals = Arrivals()
    for seq in range(4):
        arrivals.arrive(seq, 0, seq)
    arrivals.lift(3)
    assert arrivals.floor == 3 and set(arrivals.seen) == {3}
    arrivals.lift(1)
    assert arrivals.floor == 3 and not arrivals.arrive(2, 0, 9)  # below it: a duplicate
    assert arrivals.take() == ([3, 9], 9)


def test_what_could_not_be_sent_is_owed_again():
    arrivals = Arrivals()
    arrivals.arrive(0, 0, 1)
    arrivals.arrive(None, 0, 2)
    txs, _ = arrivals.take()
    arrivals.keep(txs)
    assert arrivals.owed and arrivals.take() == ([1, 2], 2)


# ---- a simulated network ---------------------------------------------------------------------------


@dataclass
class Wire:
    """One receiver's data connection (FIFO) and its acknowledgements on their way back."""

    data: deque = field(default_factory=deque)
    acks: deque = field(default_factory=deque)
    up: bool = True
    start: int = 0  # the step before which it stays down (a receiver that joins late)
    dead: bool = False  # killed: never back (detached, as after the liveness window)


class Network:
    """A sender (SendLog, round-robin over the connections that are up, ticks when stalled, settles
    what it sent WINDOW steps ago) and `receivers` Arrivals, each taking a message in 60% of the
    steps (`rng`) and confirming at once (the first time: after `first_ack` messages); `step()` moves
    everything one message; `drop(i)` loses what is in flight on receiver i's connection and link
    (and its acks when `lose_acks`); `reconnect(i)` brings it back (its link says hello); `kill(i)`
    drops it for good. `late` receivers (the last ones) start down and join at step `joins`."""

    WINDOW = 60  # steps: the liveness window

    def __init__(self, receivers: int, total: int, rng: random.Random, *, lose_acks: bool = False,
                 max_messages: int = 32, late: int = 0, joins: int = 0, first_ack: int = 1):
        self.log = SendLog(max_messages=max_messages)
        self.wires = [Wire() for _ in range(receivers)]
        for wire in self.wires[receivers - late:]:
            wire.up, wire.start = False, joins
        self.log.connections = sum(wire.up for wire in self.wires)
        self.arrivals = [Arrivals() for _ in range(receivers)]
        self.total, self.lose_acks, self.rng = total, lose_acks, rng
        self.first_ack = first_ack  # messages a receiver takes before its first ack (then: at once)
        self.acked: set[int] = set()  # receivers that sent an ack
        self.next_seq, self.turn, self.now = 0, 0, 0
        self.sent_by: deque = deque()  # log.tx at each step, for settling
        self.taken: Counter = Counter()  # batch seq -> times a receiver handed it out
        self.takers: dict = {}  # batch seq -> the receivers that took it
        self.markers = 0

    def _route(self, key: tuple | None, frames: list) -> None:
        """Send one message on the next connection that is up (a tick, key None: on every one)."""
        up = [i for i, wire in enumerate(self.wires) if wire.up]
        floor = self.log.floor(self.next_seq)
        if key is None:
            tx, self.log.tx = self.log.tx, self.log.tx + 1
            for i in up:
                self.wires[i].data.append(("tick", None, floor, tx))
            return
        tx = self.log.transmit(key, frames, 1)
        self.turn = (self.turn + 1) % len(up)
        self.wires[up[self.turn]].data.append((key[0], key[1] if key[0] == "batch" else None, floor, tx))

    def _sender(self) -> None:
        self.sent_by.append(self.log.tx)
        if len(self.sent_by) > self.WINDOW:
            self.log.settle(self.sent_by.popleft())
        for i, wire in enumerate(self.wires):
            while wire.up and wire.acks:
                self.log.confirm(f"r{i}", *wire.acks.popleft())
        if not any(wire.up for wire in self.wires):
            return
        lost = self.log.lost()
        for entry in lost:
            self._route(entry.key, entry.frames)
        if lost:
            return
        if self.next_seq <= self.total and not self.log.full:
            key = ("batch", self.next_seq) if self.next_seq < self.total else ("marker", self.total)
            self._route(key, [self.next_seq])
            self.next_seq += 1
        elif self.log.entries and self.log.vouched:  # stalled: a tick shows what was lost
            self._route(None, [])

    def _receiver(self, i: int) -> None:
        wire, arrivals = self.wires[i], self.arrivals[i]
        if wire.up and wire.data and self.rng.random() < 0.6:  # slower than the sender: messages in flight
            kind, seq, floor, tx = wire.data.popleft()
            if arrivals.arrive(seq, floor, tx) and seq is not None:
                self.taken[seq] += 1
                self.takers.setdefault(seq, []).append(i)
            self.markers += kind == "marker"
        if i not in self.acked and wire.data and len(arrivals.seen) + len(arrivals.pending) < self.first_ack:
            return  # its first ack waits (a real one goes after ACK_EVERY messages, or when caught up)
        if arrivals.owed and (arrivals.fresh or len(arrivals.pending) >= 3 or not wire.data):
            txs, high = arrivals.take()
            self.acked.add(i)
            if wire.up:
                wire.acks.append((txs, high))
            else:  # the link is down: confirm them with the next ack
                arrivals.keep(txs)

    def step(self) -> None:
        self.now += 1
        self._sender()
        for i in range(len(self.wires)):
            self._receiver(i)

    def drop(self, i: int) -> None:
        wire = self.wires[i]
        wire.data.clear()
        if self.lose_acks:
            wire.acks.clear()
        wire.up = False
        self.log.connections -= 1
        self.log.leave(f"r{i}")  # its link went with it (the sender's link monitor says so)

    def reconnect(self, i: int) -> None:
        self.wires[i].up = True
        self.log.connections += 1
        if i in self.acked:  # its link says hello at once (an ack of what it has)
            self.wires[i].acks.append(self.arrivals[i].take())

    def kill(self, i: int) -> None:
        if self.wires[i].up:
            self.drop(i)
        self.wires[i].dead = True
        self.log.detach(f"r{i}")

    @property
    def done(self) -> bool:
        return self.next_seq > self.total and not self.log.entries


def run(network: Network, *, p_drop: float, p_back: float, steps: int = 20000) -> int:
    """Step `network` with random drops and reconnects until it is done; the number of drops."""
    drops, rng = 0, network.rng
    for _ in range(steps):
        if network.done:
            break
        for i, wire in enumerate(network.wires):
            if wire.up and rng.random() < p_drop:
                network.drop(i)
                drops += 1
            elif not wire.up and not wire.dead and network.now >= wire.start and rng.random() < p_back:
                network.reconnect(i)
        network.step()
    for i, wire in enumerate(network.wires):  # heal, then let it finish
        if not wire.up and not wire.dead:
            network.reconnect(i)
    for _ in range(steps):
        if network.done:
            break
        network.step()
    return drops


@pytest.mark.parametrize("receivers", [1, 2, 3])
@pytest.mark.parametrize("seed", [1, 2, 5])
def test_every_batch_arrives_exactly_once_through_drops_and_reconnects(receivers, seed):
    network = Network(receivers, 300, random.Random(seed))
    drops = run(network, p_drop=0.005, p_back=0.2)
    assert drops >= 2 and network.log.resent > 0  # the faults happened and lost something
    assert network.done, f"{network.log.outstanding()} never confirmed"
    assert network.taken == Counter(range(300)), "some batch lost or taken twice"
    assert network.markers == 1
    assert network.log.refused == network.log.abandoned == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_receiver_whose_acks_are_lost_takes_every_batch_once(seed):
    network = Network(1, 300, random.Random(seed), lose_acks=True)
    run(network, p_drop=0.005, p_back=0.2)
    assert network.done and network.taken == Counter(range(300))  # lost acks are repeated (cumulative)
    assert network.log.refused == network.log.abandoned == 0


def test_without_drops_nothing_is_resent_and_the_log_ends_empty():
    network = Network(2, 100, random.Random(0))
    run(network, p_drop=0.0, p_back=0.0)
    assert network.done and network.taken == Counter(range(100)) and network.log.resent == 0
    assert sum(arrivals.duplicates for arrivals in network.arrivals) == 0


def test_a_receiver_that_took_a_message_before_its_first_ack_does_not_get_it_resent_elsewhere():
    log = log_with(("batch", 0), receivers=["b"], connections=2)  # tx 0 -> b
    log.transmit(("batch", 1), [b"x"], 10)  # tx 1 -> a, which takes it; its first ack is not out yet
    log.connections = 1  # a's data connection drops
    log.transmit(("batch", 2), [b"x"], 10)  # tx 2 -> b
    log.confirm("b", [0, 2], 2)
    assert [entry.key for entry in log.lost()] == []  # a may have taken batch 1: not provably lost


def gap() -> SendLog:
    """test_a_receiver_that_took_...: batch 1 went to receiver a (not attached yet), whose connection dropped."""
    log = log_with(("batch", 0), receivers=["b"], connections=2)
    log.transmit(("batch", 1), [b"x"], 10)
    log.connections = 1
    log.transmit(("batch", 2), [b"x"], 10)
    log.confirm("b", [0, 2], 2)
    return log


def test_a_stuck_message_is_confirmed_by_the_receiver_that_took_it():
    log = gap()
    assert [entry.key for entry in log.stuck()] == [("batch", 1)]
    log.confirm("a", [1], 1)  # a reconnected: it had taken batch 1
    assert log.stuck() == [] and log.lost() == [] and log.outstanding() == 0


def test_a_stuck_message_is_resent_once_settled_if_no_receiver_took_it():
    log = gap()
    log.transmit(("batch", 3), [b"x"], 10)
    log.confirm("a", [3], 3)  # a is back and saw tx 3, not tx 1: lost on its old connection ...
    log.confirm("b", [], 3)  # ... or taken by a receiver c that did not report yet: wait
    assert log.lost() == [] and [entry.key for entry in log.stuck()] == [("batch", 1)]
    assert log.settle(2)  # the liveness window passed since tx 1: c, if alive, has confirmed it by now
    assert [entry.key for entry in log.lost()] == [("batch", 1)] and log.stuck() == []
    assert not log.settle(2) and log.unsure == []


def test_a_receiver_whose_link_is_down_vouches_for_no_connection():
    log = log_with(receivers=["a", "b"], connections=2)
    log.leave("a")  # a's link dropped; its data connection may be open, or be another receiver's now
    log.transmit(("batch", 0), [b"x"], 10)
    log.transmit(("batch", 1), [b"x"], 10)
    log.confirm("a", [], 2)  # a is back (present again) and saw later than both
    log.transmit(("batch", 2), [b"x"], 10)
    log.confirm("b", [1, 2], 2)
    assert log.lost() == [] and [entry.key for entry in log.stuck()] == [("batch", 0)]
    log.leave("nobody")  # unknown receivers change nothing
    assert (log.present, log.away) == (2, set())
    log.detach("a")
    log.leave("b")
    log.detach("b")
    assert (log.present, log.away, log.receivers) == (0, set(), {})


def test_transmissions_are_sure_while_every_connection_has_a_present_receiver():
    log = log_with(*batches(3), receivers=["a"], connections=1)
    assert log.unsure == [] and not any(entry.unsure for entry in log.entries.values())
    log.connections = 2
    log.transmit(("batch", 3), [b"x"], 10)
    assert log.unsure == [3] and log.entries[("batch", 3)].unsure


@pytest.mark.parametrize("receivers, late", [(2, 1), (3, 2)])
@pytest.mark.parametrize("seed", range(1, 9))
def test_receivers_that_join_late_and_drop_before_their_first_ack_take_every_batch_once(receivers, late,
                                                                                      seed):
    network = Network(receivers, 300, random.Random(seed), late=late, joins=40, max_messages=256, first_ack=8)
    drops = run(network, p_drop=0.02, p_back=0.2)
    assert drops >= 3 and network.log.resent > 0
    assert network.done and network.taken == Counter(range(300)), "some batch lost or taken twice"
    assert network.log.refused == network.log.abandoned == 0


@pytest.mark.parametrize("seed", range(6))
def test_a_full_log_waits_for_stuck_messages_to_settle(seed):
    network = Network(3, 300, random.Random(seed), late=2, joins=20, max_messages=16, first_ack=6)
    run(network, p_drop=0.02, p_back=0.1)
    assert network.done and network.taken == Counter(range(300)), "some batch lost or taken twice"


@pytest.mark.parametrize("seed", range(6))
def test_a_killed_receiver_costs_only_what_it_took(seed):
    rng = random.Random(seed)
    network = Network(3, 300, rng, late=1, joins=10, max_messages=64, first_ack=6)
    victim = rng.randrange(3)
    for _ in range(rng.randrange(20, 120)):
        network.step()
    network.kill(victim)
    run(network, p_drop=0.01, p_back=0.2)
    survivors = Counter(seq for seq, who in network.takers.items() for i in who if i != victim)
    assert network.done and max(survivors.values()) == 1, "a batch taken twice by the receivers left"
    assert set(range(300)) - set(survivors) <= set(network.takers), "a batch nobody took"
    assert network.log.refused == network.log.abandoned == 0


def test_two_receivers_take_no_batch_twice_when_acks_are_lost():
    network = Network(2, 300, random.Random(1), lose_acks=True)
    run(network, p_drop=0.005, p_back=0.2)
    assert network.taken == Counter(range(300))


def test_batches_lost_only_behind_other_losses_are_never_given_up():
    network = Network(1, 300, random.Random(4))
    run(network, p_drop=0.01, p_back=0.2)
    assert network.log.refused == 0 and network.taken == Counter(range(300))
