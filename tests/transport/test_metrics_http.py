"""The metrics endpoint: the pure record -> metrics core, and a Connection's endpoint over real HTTP."""

import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from tensorcom.transport.connection import Connection
from tensorcom.transport.metrics_http import open_metrics, parse_address
from tensorcom.transport.observation import METRICS, metric_families, normalize

prometheus_parser = pytest.importorskip("prometheus_client.parser")

SERVER_RECORD = {
    "batches": 10, "samples": 40, "batches_per_s": 2.5, "samples_per_s": 10.0, "seconds": 4.0, "workers": 2,
    "consumers": [{"name": "job-a", "samples": 24, "samples_per_s": 6.0, "lag": 1, "data_wait": 0.4,
                   "data_wait_s": 1.5},
                  {"name": "job-b", "samples": 16, "samples_per_s": 4.0, "lag": 0,
                   "data_wait": {"share": 0.1, "seconds": 0.2}}],
    "stages": {"decode": {"seconds": 3.0, "share": 0.75, "per_sample_ms": 2.0},
               "send": {"seconds": 1.0, "share": 0.25, "per_sample_ms": 0.5}},
    "idle_s": 1.0, "busy_s": 3.0, "verdict": "consumers waiting on data (25%): add workers",
}


def samples_of(families):
    return {f.name: {tuple(sorted(labels.items())): value for labels, value in f.samples} for f in families}


def test_a_server_record_becomes_metrics_with_consumer_and_stage_labels():
    got = samples_of(metric_families(normalize(SERVER_RECORD)))
    assert list(got) == list(METRICS)
    assert got["tensorcom_batches_total"] == {(): 10.0} and got["tensorcom_workers"] == {(): 2.0}
    assert got["tensorcom_consumer_data_wait_seconds_total"] == {(("consumer", "job-a"),): 1.5,
                                                                 (("consumer", "job-b"),): 0.2}
    assert got["tensorcom_consumer_data_wait_ratio"] == {(("consumer", "job-a"),): 0.4, (("consumer", "job-b"),): 0.1}
    assert got["tensorcom_stage_seconds_total"] == {(("stage", "decode"),): 3.0, (("stage", "send"),): 1.0}
    assert got["tensorcom_server_idle_seconds_total"] == {(): 1.0}
    assert got["tensorcom_verdict"] == {(("verdict", SERVER_RECORD["verdict"]),): 1.0}
    assert got["tensorcom_bytes_total"] == {}  # a server does not count bytes: no sample


def test_a_receiver_record_prefers_the_recent_data_wait():
    record = normalize({"batches": 3, "consumers": [{"name": "me", "data_wait": 0.5, "recent_data_wait": 0.2,
                                                     "data_wait_s": 7.0}]})
    assert record["consumers"] == [{"name": "me", "samples": None, "samples_per_s": None, "lag": None,
                                    "data_wait_s": 7.0, "data_wait": 0.2}]
    assert record["stages"] == {} and record["verdict"] is None and record["workers"] is None


@pytest.mark.parametrize("text", ["nonsense", "127.0.0.1:http", "127.0.0.1:70000", 9100, None])
def test_a_bad_address_is_a_clear_error(text):
    with pytest.raises(ValueError, match="metrics"):
        parse_address(text)


def test_addresses_default_to_loopback():
    assert parse_address(":0") == ("127.0.0.1", 0) and parse_address("0.0.0.0:9100") == ("0.0.0.0", 9100)


@pytest.mark.net
def test_a_bad_metrics_value_on_a_connection_is_a_clear_error():
    with pytest.raises(ValueError, match="HOST:PORT"):
        Connection("zpull://127.0.0.1:*", metrics="9100")


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.net
def test_a_receiving_connection_serves_its_figures(free_port):
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=10, metrics="127.0.0.1:0") as receiver, \
            Connection(f"zpush://127.0.0.1:{port}") as sender:
        for i in range(5):
            sender.send([np.full((4, 3), i, np.float32), np.arange(4, dtype=np.int32)])
        assert [int(receiver.recv()[0][0, 0]) for _ in range(5)] == list(range(5))
        base = receiver.metrics_url.removesuffix("metrics")
        status, text = get(receiver.metrics_url)
        families = {f.name: f for f in prometheus_parser.text_string_to_metric_families(text)}
        assert status == 200
        assert families["tensorcom_batches"].samples[0].value == 5.0  # a counter's family drops "_total"
        assert families["tensorcom_samples"].samples[0].value == 20.0
        assert families["tensorcom_bytes"].samples[0].value == receiver.stats.total
        (wait,) = families["tensorcom_consumer_data_wait_seconds"].samples
        assert wait.name == "tensorcom_consumer_data_wait_seconds_total"
        assert wait.labels == {"consumer": receiver.sender}
        assert {"tensorcom_consumer_data_wait_ratio", "tensorcom_workers", "tensorcom_stage_seconds"} <= set(families)
        status, body = get(base + "status.json")
        record = json.loads(body)
        assert status == 200 and record["batches"] == 5
        assert [c["name"] for c in record["consumers"]] == [receiver.sender]
        assert set(record) == {"batches", "samples", "bytes", "batches_per_s", "samples_per_s", "seconds", "workers",
                               "idle_s", "busy_s", "verdict", "consumers", "stages"}
        status, page = get(base)
        assert status == 200 and "status.json" in page and "<script>" in page
        assert get(base + "nothing")[0] == 404
    with pytest.raises(urllib.error.URLError):  # close() stopped the endpoint
        urllib.request.urlopen(receiver.metrics_url, timeout=5)


@pytest.mark.net
def test_a_failing_source_answers_500_and_the_endpoint_goes_on():
    calls = []

    def source():
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("gone")
        return {"batches": 1}

    endpoint = open_metrics("127.0.0.1:0", source)
    try:
        assert get(endpoint.url + "status.json")[0] == 500
        assert json.loads(get(endpoint.url + "status.json")[1])["batches"] == 1
    finally:
        endpoint.close()
