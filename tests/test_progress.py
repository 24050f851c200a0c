"""tensorcom.progress: the bar or plain lines of long work, with the rate of tensorcom.rates."""

import io

import pytest

from tensorcom.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_every_interval_with_extra_counts():
    stream = io.StringIO()
    with Progress("job", interval=0.0, stream=stream) as shown:
        shown.update(2, shards=1)
        shown.update(3, shards=2)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("job: 5 samples, 2 shards, ") and lines[1].endswith("samples/s")


def test_quiet_shows_nothing_but_counts():
    stream = Terminal()
    with Progress("job", enabled=False, interval=0.0, stream=stream) as shown:
        shown.update(4)
    assert stream.getvalue() == "" and shown.count == 4


def test_a_terminal_gets_a_tqdm_bar():
    pytest.importorskip("tqdm")
    stream = Terminal()
    with Progress("job", unit="samples", interval=0.0, stream=stream) as shown:
        assert shown.bar is not None
        shown.update(7, shards=1)
    assert "job" in stream.getvalue() and "\n" not in stream.getvalue().strip("\n")


def test_plain_lines_show_the_rate_of_tensorcom_rates():
    """The line's rate is the one window (tensorcom.rates), its timing the one throttle."""
    now = [0.0]
    stream = io.StringIO()
    shown = Progress("job", interval=5.0, stream=stream, clock=lambda: now[0])
    for t in range(1, 31):  # 3 samples a second for 20 s, then 10 a second
        now[0] = float(t)
        shown.update(3 if t <= 20 else 10)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 6 and lines[-1] == "job: 160 samples, 10.0 samples/s"
