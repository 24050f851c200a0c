"""tensorcom.serve(workers="auto"): the number of serving processes changes at an epoch boundary,
and the consumer still gets every epoch exactly once, each portion in order."""

import functools
import os
import threading

import numpy as np
import pytest

from tensorcom.pipeline import Pipeline
from tensorcom.pipeline.serving import serve
from tensorcom.transport.connection import Connection

pytestmark = [pytest.mark.net, pytest.mark.procs]

HELD = 39  # the last sample of the source: never in a portion's first batch, so a batch went out before


def to_sample(i):
    return {"__key__": f"s{i:04d}", "i": np.int32(i)}


def hold_at(fifo, sample):
    """Sample HELD waits until the test's scaler opens `fifo` (opening a named pipe to read blocks
    until a writer opens it); once the scaler has removed it, nothing waits."""
    if sample["i"] == HELD and os.path.exists(fifo):
        with open(fifo) as stream:
            stream.read()
    return sample


class Shuffled:
    """Picklable factory: 40 samples shuffled per epoch, batches of 5; with `fifo`, held at HELD."""

    def __init__(self, fifo=None):
        self.fifo = fifo

    def __call__(self):
        made = Pipeline(range(40), seed=3).shuffle(8).map(to_sample)
        return (made.map(functools.partial(hold_at, self.fifo)) if self.fifo else made).batch(5)


class OneStep:
    """A scaler that says +1 at its first observation (while epoch 0 is held, so the change comes at
    its end) and lets the held sample go once the processes have been asked to stop there."""

    def __init__(self, fifo):
        self.fifo, self.seen = fifo, []

    def observe(self, now, data_wait, idle_share, workers, idle_cores):
        self.seen.append(workers)
        return 1 if len(self.seen) == 1 else 0

    def decided(self, target):
        with open(self.fifo, "w") as stream:  # blocks until the held process opens it
            os.unlink(self.fifo)
            stream.write("go")


def portion_orders(epoch, portions=2):
    """Each portion's batches of `epoch`, as tuples of sample ids, in the order it serves them."""
    orders = []
    for v in range(portions):
        pipeline = Shuffled()().shard(v, portions)
        pipeline.set_epoch(epoch)
        orders.append([tuple(int(i) for i in batch["i"]) for batch in pipeline])
    return orders


@pytest.mark.parametrize("served, received", [("zpush", "zpull"), ("zshare", "zjoin")])
def test_auto_workers_change_at_an_epoch_boundary_without_loss_or_reorder(free_port, tmp_path, served, received):
    """The processes change from one to two after epoch 0, sending to the consumer directly or to a
    sharing server (its input takes the new processes' portions over)."""
    fifo = str(tmp_path / "held")
    os.mkfifo(fifo)
    scaler, port, result = OneStep(fifo), free_port(), {}

    def run():
        try:
            result["stats"] = serve(Shuffled(fifo), f"{served}://127.0.0.1:{port}", workers="auto", min_workers=1,
                                    max_workers=2, scaler=scaler, epochs=3, report=None)
        except BaseException as exc:
            result["error"] = exc

    # between epochs 0 and 1 no process sends: the new ones are starting, which on a loaded machine can
    # take longer than the default liveness window (10 s), so the receiver's window is its timeout
    with Connection(f"{received}://127.0.0.1:{port}", timeout=60, liveness=60) as conn:
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        epochs = [[tuple(int(i) for i in batch["i"]) for batch in conn] for _ in range(3)]
        thread.join(timeout=60)
    assert "error" not in result, result
    assert scaler.seen[0] == 1 and result["stats"]["workers"] == 2  # one process, then two
    for epoch, got in enumerate(epochs):
        orders = portion_orders(epoch)
        assert sorted(got) == sorted(batch for order in orders for batch in order)  # each batch once
        for order in orders:
            assert [batch for batch in got if batch in order] == order  # each portion in its order


@pytest.mark.parametrize("options, message", [
    ({"min_workers": 0}, "min_workers"),
    ({"min_workers": 3, "max_workers": 2}, "above max_workers"),
    ({"max_workers": 2, "portions": 1, "min_workers": 2}, "portions"),
    ({"min_workers": (os.cpu_count() or 1) + 1, "max_workers": (os.cpu_count() or 1) + 1}, "cores"),
])
def test_auto_workers_with_a_bad_minimum_or_maximum_is_a_clear_error(options, message):
    with pytest.raises(ValueError, match=message):
        serve(Shuffled(), "zpush://127.0.0.1:9", workers="auto", report=None, **options)


def test_auto_workers_refuses_binding_urls_and_plain_counts_refuse_auto_options():
    with pytest.raises(ValueError, match="connecting URLs"):
        serve(Shuffled(), "zpub://127.0.0.1:9", workers="auto", report=None)
    with pytest.raises(ValueError, match="workers='auto'"):
        serve(Shuffled(), "zpush://127.0.0.1:9", workers=2, max_workers=4, report=None)


def small_pipeline():
    """A factory for the command line: 20 samples in batches of 4."""
    return Pipeline(range(20)).map(to_sample).batch(4)


def test_command_line_w_auto_serves_each_epoch_once_over_max_workers_portions(free_port):
    from tensorcom.cli import serve as cli

    port, result = free_port(), {}
    argv = [f"{__file__}:small_pipeline", f"zpush://127.0.0.1:{port}", "-w", "auto", "--max-workers", "2",
            "--epochs", "2", "-q"]
    with Connection(f"zpull://127.0.0.1:{port}", timeout=60) as conn:
        thread = threading.Thread(target=lambda: result.setdefault("status", cli.main(argv)), daemon=True)
        thread.start()
        epochs = [sorted(int(i) for batch in conn for i in batch["i"]) for _ in range(2)]
        thread.join(timeout=60)
    # two portions (--max-workers), so each pass ends after both portions' markers
    assert epochs == [list(range(20))] * 2 and result == {"status": 0}


@pytest.mark.parametrize("more, message", [
    (["-w", "auto", "--min-workers", "3", "--max-workers", "2"], "above max_workers"),
    (["-w", "2", "--max-workers", "4"], "go with -w auto"),
])
def test_command_line_refuses_bad_auto_bounds_in_one_line(capsys, more, message):
    from tensorcom.cli import serve as cli

    with pytest.raises(SystemExit) as info:
        cli.main([f"{__file__}:small_pipeline", "zpush://127.0.0.1:9", *more])
    assert info.value.code == 2 and message in capsys.readouterr().err.strip().splitlines()[-1]
