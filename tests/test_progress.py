"""tensorcom.progress: the bar or plain lines of long work, and sliding-window rates."""

import io

import pytest

from tensorcom.progress import Progress, RateWindow


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


def test_rates_start_at_the_first_count_and_slide():
    window = RateWindow(2.0)
    window.add((0, 0), now=0.0)
    assert window.first is None and window.rates(now=1.0) == ()
    window.add((4, 40), now=10.0)  # first batch: rates count from here, not from the start
    assert window.rates(now=12.0) == (2.0, 20.0)
    for t in range(11, 21):
        window.add((4 + 10 * (t - 10), 40), now=float(t))
    assert window.rates(now=20.0) == (10.0, 0.0)


def test_window_must_be_positive():
    with pytest.raises(ValueError, match="window"):
        RateWindow(0)
