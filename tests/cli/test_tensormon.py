"""tensormon --consumers: each job's data wait per report (--json records, lines, a rich table), and
--stages: the server's stage shares and verdict as its serving process reported them."""

from __future__ import annotations

import json
import threading
import types

import pytest

from tensorcom import Connection
from tensorcom.cli import tensormon
from tensorcom.rates import RateReport

STATUS = [{"name": "job-a", "epoch": 0, "pos": 7, "lag": 1, "samples_per_s": 12.5, "credit": 4, "free": 3,
           "data_wait": 0.375, "data_wait_s": 1.5},
          {"name": "job-b", "epoch": 0, "pos": 2, "lag": None, "samples_per_s": 3.0, "credit": 2, "free": 2}]
SERVER = {"stages": {"decode": {"seconds": 6.0, "share": 0.75}, "read": {"seconds": 2.0, "share": 0.25}},
          "verdict": "consumers waiting on data (38%): add workers"}


def test_lines_show_data_wait_and_stages_largest_first():
    text = tensormon.report_text(STATUS, SERVER, stages=True).splitlines()
    assert text[1].endswith("credit in use 1/4, data wait 38%")
    assert "data wait" not in text[2]  # an older consumer reports none
    assert text[3:] == ["  stage decode: 75% (6.0 s)", "  stage read: 25% (2.0 s)",
                        "  verdict: consumers waiting on data (38%): add workers"]
    assert tensormon.stage_lines(None) == ["  stages: none reported by the server"]


def test_the_terminal_table_has_a_data_wait_column():
    console = pytest.importorskip("rich.console").Console(record=True, width=140, force_terminal=False)
    console.print(tensormon.report_table(STATUS, SERVER, stages=True))
    text = console.export_text()
    assert "data wait" in text and "38%" in text and "job-b" in text and "stage decode: 75%" in text


@pytest.mark.net
def test_json_records_carry_each_consumers_data_wait_and_the_servers_stages(free_port, capsys):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}")
    consumer = Connection(f"zjoin://{url}", credit=1, timeout=10)
    try:
        for i in range(3):
            server.send({"x": [i]})
        taken = threading.Thread(target=lambda: [consumer.recv() for _ in range(3)], daemon=True)
        taken.start()
        taken.join(timeout=10)
        report = RateReport(every=1.0, on_report=lambda stats: None,
                            hub=types.SimpleNamespace(server=server._end.server))
        report.add((3, 3))
        report.maybe_report(lambda: {"samples_per_s": 1.0, **SERVER}, str, force=True)  # the serve's report
        for _ in range(5):  # status reports come about every second
            assert tensormon.main([f"zjoin://{url}", "--consumers", "--stages", "--json", "--count", "1",
                                   "--report", "1.2"]) == 0
            record = json.loads(capsys.readouterr().out.splitlines()[-1])
            if record["consumers"] and record["consumers"][0]["acked"] == 3:
                break
        (mine,) = record["consumers"]
        assert mine["name"] == consumer.sender and 0.0 <= mine["data_wait"] <= 1.0 and mine["data_wait_s"] > 0.0
        assert record["server"]["stages"] == SERVER["stages"] and record["server"]["verdict"] == SERVER["verdict"]
    finally:
        consumer.close()
        server.close(linger=5)


def test_stages_needs_consumers(capsys):
    with pytest.raises(SystemExit) as exit_info:
        tensormon.main(["zjoin://127.0.0.1:1", "--stages"])
    assert exit_info.value.code == 2 and "--stages needs --consumers" in capsys.readouterr().err
