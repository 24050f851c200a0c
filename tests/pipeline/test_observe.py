"""tensorcom.serve(..., metrics=): /metrics, /status.json and the status page of a real serve (one
serving process, a zshare server, two consumers in threads), the page loaded in a real headless
Chromium, and the Grafana dashboard's metric names checked against a real scrape."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from conftest import find_free_port
from tensorcom.pipeline import Pipeline
from tensorcom.pipeline.serving import serve
from tensorcom.transport.connection import Connection

prometheus_parser = pytest.importorskip("prometheus_client.parser")
pytestmark = [pytest.mark.net, pytest.mark.procs]

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana-dashboard.json"
BATCHES, TAKEN = 40, 3  # the stream's batches; each consumer takes TAKEN, then waits for the tests


def to_sample(i):
    return {"i": np.int32(i), "x": np.full(4, i, np.int32)}


def consume(url: str, taken: threading.Event, release: threading.Event, got: list) -> None:
    """Join, take TAKEN batches, say so, wait for `release`, then read the rest of the epoch."""
    with Connection(f"zjoin://{url}", timeout=60) as conn:
        batches = iter(conn)
        got.extend(int(i) for _ in range(TAKEN) for i in next(batches)["i"])
        taken.set()
        release.wait(timeout=120)
        got.extend(int(i) for batch in batches for i in batch["i"])


@pytest.fixture(scope="module")
def served():
    """A running serve whose two consumers hold TAKEN batches each: (status page URL, status record)."""
    url, metrics = f"127.0.0.1:{find_free_port()}", f"127.0.0.1:{find_free_port()}"
    release, result = threading.Event(), {}
    consumers = [(threading.Event(), []) for _ in range(2)]

    def run():
        try:
            pipeline = Pipeline(range(4 * BATCHES)).map(to_sample).batch(4)
            result["stats"] = serve(pipeline, f"zshare://{url}", workers=1, report=None, min_consumers=2,
                                    metrics=metrics)
        except BaseException as exc:
            result["error"] = exc

    threads = [threading.Thread(target=run, daemon=True)]
    threads += [threading.Thread(target=consume, args=(url, taken, release, got), daemon=True)
                for taken, got in consumers]
    for thread in threads:
        thread.start()
    try:
        assert all(taken.wait(timeout=60) for taken, _ in consumers), result
        base = f"http://{metrics}/"
        yield base, status_with_a_batch(base)
    finally:
        release.set()
        for thread in threads:
            thread.join(timeout=60)
    assert "error" not in result, result.get("error")
    assert all(sorted(got) == list(range(4 * BATCHES)) for _, got in consumers)  # the endpoint changed nothing


def status(base: str) -> dict:
    return json.loads(urllib.request.urlopen(base + "status.json", timeout=10).read())


def status_with_a_batch(base: str) -> dict:
    """/status.json once it shows a batch and both consumers: the supervisor polls for its worker's
    progress and the sharing server refreshes its consumers' status about every second, so the
    consumers may hold batches before either says so."""
    deadline = time.monotonic() + 30
    while True:
        record = status(base)
        if record["batches"] and len(record["consumers"]) == 2 or time.monotonic() > deadline:
            return record


def waits(record: dict) -> dict:
    """Each consumer's data wait in a /status.json record, by name (None: not reported yet)."""
    return {c["name"]: c["data_wait_s"] for c in record["consumers"]}


def scrape_between_equal_waits(base: str) -> tuple[dict, dict]:
    """(/metrics families, /status.json record) with the consumers' data waits the same in the records
    read just before and just after the scrape: a refresh of the consumers' status (about every second)
    between one record and the scrape would make them disagree."""
    deadline = time.monotonic() + 30
    while True:
        before = status(base)
        families, _ = scrape(base)
        after = status(base)
        if waits(before) == waits(after) or time.monotonic() > deadline:
            return families, after


def scrape(base: str) -> tuple[dict, set[str]]:
    """The families of /metrics by name, and every metric name it declares (a counter's with "_total")."""
    text = urllib.request.urlopen(base + "metrics", timeout=10).read().decode()
    families = {f.name: f for f in prometheus_parser.text_string_to_metric_families(text)}
    return families, {f.name + ("_total" if f.type == "counter" else "") for f in families.values()}


def test_serve_metrics_have_the_consumers_and_the_workers(served):
    base, _ = served
    families, record = scrape_between_equal_waits(base)
    names = sorted(c["name"] for c in record["consumers"])
    assert len(names) == 2 and record["workers"] == 1 and record["batches"] >= 1
    assert families["tensorcom_workers"].samples[0].value == 1.0
    assert families["tensorcom_batches"].samples[0].value >= 1
    rates = families["tensorcom_consumer_samples_per_second"].samples
    assert sorted(s.labels["consumer"] for s in rates) == names
    waits = {s.labels["consumer"]: s.value for s in families["tensorcom_consumer_data_wait_seconds"].samples}
    assert waits == {c["name"]: c["data_wait_s"] for c in record["consumers"] if c["data_wait_s"] is not None}


def test_every_metric_of_the_grafana_dashboard_exists(served):
    base, _ = served
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used = {name for query in queries for name in re.findall(r"\btensorcom_[a-z_]+", query)}
    _, exposed = scrape(base)
    assert len(used) >= 10 and used <= exposed, sorted(used - exposed)


class Page(HTMLParser):
    """The texts of the elements with an id, and the data-consumer rows, of a dumped DOM."""

    def __init__(self):
        super().__init__()
        self.texts: dict[str, str] = {}
        self.consumers: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "data-consumer" in attrs:
            self.consumers.append(attrs["data-consumer"])
        if "id" in attrs:
            self.open.append(attrs["id"])
            self.texts[attrs["id"]] = ""

    def handle_endtag(self, tag):
        if self.open and tag in ("b", "div", "span", "tbody"):
            self.open.pop()

    def handle_data(self, data):
        for key in self.open:
            self.texts[key] += data


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="needs Debian's headless Chromium (apt-get install chromium) to load the page")
def test_the_status_page_shows_the_live_consumers_in_chromium(served, tmp_path):
    base, record = served
    dom = subprocess.run(["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          f"--user-data-dir={tmp_path}", "--dump-dom", "--virtual-time-budget=3000", base],
                         capture_output=True, text=True, timeout=90, check=True).stdout
    page = Page()
    page.feed(dom)
    assert sorted(page.consumers) == sorted(c["name"] for c in record["consumers"])  # rows from status.json
    assert float(page.texts["rate"]) >= 0.0 and int(page.texts["batches"]) >= 1  # numbers, not the "–" placeholder
    assert page.texts["workers"] == "1" and page.texts["updated"] not in ("", "never")


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:port"])
def test_a_bad_metrics_value_stops_serve_before_it_starts(address):
    with pytest.raises(ValueError, match="metrics"):
        serve(Pipeline(range(4)).map(to_sample).batch(2), "zpush://127.0.0.1:9", report=None, metrics=address)
