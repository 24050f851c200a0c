"""What a running server or Connection reports, as one JSON-ready record and as Prometheus metrics.

    record = normalize(raw)      # a serving report / Connection snapshot -> the /status.json shape
    families = metric_families(record)   # -> [Family(name, kind, help, samples)] for /metrics

Pure: no sockets, no threads, no prometheus_client (tensorcom.transport.metrics_http serves these).
`raw` is whatever the owner knows, with keys missing where it does not know them:
"batches", "samples", "bytes" (totals), "batches_per_s", "samples_per_s" (over the window of
tensorcom.rates), "seconds" (since start), "workers", "consumers" (a sharing server's consumer
records: "name", "samples", "samples_per_s", "lag", and the data wait: "data_wait" as a fraction or
a dict, "data_wait_s", "recent_data_wait"), "stages" ({stage: {"seconds", "share",
"per_sample_ms"}}), "idle_s", "busy_s", "verdict". normalize() keeps those keys (None or empty where
unknown) and gives each consumer "name", "samples", "samples_per_s", "lag", "data_wait_s" (seconds
blocked waiting for data in all) and "data_wait" (the fraction of its time blocked, recent window
first).

The metrics (METRICS lists them with their help; docs/observability.md explains them): counters
end in `_total`; a family whose value the owner does not know has no sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Labels = dict[str, str]

# name -> (kind, label, help); label "" for a family of one sample
METRICS: dict[str, tuple[str, str, str]] = {
    "tensorcom_batches_total": ("counter", "", "Batches sent (a server) or received (a receiving Connection)."),
    "tensorcom_samples_total": ("counter", "", "Samples in those batches."),
    "tensorcom_bytes_total": ("counter", "", "Bytes of those batches (Connections; servers do not count bytes)."),
    "tensorcom_batches_per_second": ("gauge", "", "Batches per second over the last 10 s."),
    "tensorcom_samples_per_second": ("gauge", "", "Samples per second over the last 10 s."),
    "tensorcom_uptime_seconds": ("gauge", "", "Seconds since the server or Connection started counting."),
    "tensorcom_workers": ("gauge", "", "Serving worker processes."),
    "tensorcom_consumers": ("gauge", "", "Consumers joined to the sharing server (or 1: this receiver)."),
    "tensorcom_consumer_samples_total": ("counter", "consumer", "Samples a consumer acknowledged or received."),
    "tensorcom_consumer_samples_per_second": ("gauge", "consumer", "A consumer's samples per second (10 s)."),
    "tensorcom_consumer_lag_batches": ("gauge", "consumer", "Batches a consumer is behind the stream's head."),
    "tensorcom_consumer_data_wait_seconds_total": ("counter", "consumer",
                                                   "Seconds a consumer spent blocked waiting for the next batch."),
    "tensorcom_consumer_data_wait_ratio": ("gauge", "consumer",
                                           "Fraction of a consumer's time blocked waiting for data (recent)."),
    "tensorcom_stage_seconds_total": ("counter", "stage", "Worker seconds spent in a pipeline stage, all workers."),
    "tensorcom_stage_share_ratio": ("gauge", "stage", "A stage's share of the workers' busy time."),
    "tensorcom_stage_sample_milliseconds": ("gauge", "stage", "Milliseconds a stage spends per sample."),
    "tensorcom_server_idle_seconds_total": ("counter", "", "Worker seconds spent waiting for consumers' credit."),
    "tensorcom_server_busy_seconds_total": ("counter", "", "Worker seconds spent producing batches."),
    "tensorcom_verdict": ("gauge", "verdict", "1 for the server's current verdict (who waits for whom)."),
}


@dataclass
class Family:
    """One metric family: `name` (as exposed), `kind` ("counter" or "gauge"), `help`, and its samples
    as (labels, value) pairs."""

    name: str
    kind: str
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _wait(record: dict) -> tuple[float | None, float | None]:
    """(seconds blocked in all, fraction blocked) of a consumer record, whatever shape it has."""
    wait = record.get("data_wait")
    if isinstance(wait, dict):
        seconds = _number(wait.get("seconds", wait.get("data_wait_s")))
        ratio = _number(wait.get("recent", wait.get("recent_data_wait", wait.get("share", wait.get("fraction")))))
        return seconds, ratio
    recent = _number(record.get("recent_data_wait"))
    return _number(record.get("data_wait_s")), recent if recent is not None else _number(wait)


def consumer(record: dict) -> dict:
    """A consumer record in the /status.json shape (module docstring)."""
    seconds, ratio = _wait(record)
    return {"name": str(record.get("name", "?")), "samples": _number(record.get("samples")),
            "samples_per_s": _number(record.get("samples_per_s")), "lag": _number(record.get("lag")),
            "data_wait_s": seconds, "data_wait": ratio}


def normalize(raw: dict) -> dict:
    """The /status.json record of `raw` (module docstring): every key present, None where unknown."""
    keys = ("batches", "samples", "bytes", "batches_per_s", "samples_per_s", "seconds", "workers", "idle_s", "busy_s")
    stages = raw.get("stages") if isinstance(raw.get("stages"), dict) else {}
    return {**{key: _number(raw.get(key)) for key in keys},
            "verdict": raw.get("verdict") if isinstance(raw.get("verdict"), str) else None,
            "consumers": [consumer(c) for c in raw.get("consumers") or [] if isinstance(c, dict)],
            "stages": {str(name): {k: _number(v.get(k)) for k in ("seconds", "share", "per_sample_ms")}
                       for name, v in stages.items() if isinstance(v, dict)}}


def _values(record: dict) -> dict[str, list[tuple[Labels, Any]]]:
    """Metric name -> (labels, value) pairs of a normalized record (values may be None)."""
    consumers, stages = record["consumers"], record["stages"]

    def per_consumer(key: str) -> list[tuple[Labels, Any]]:
        return [({"consumer": c["name"]}, c[key]) for c in consumers]

    def per_stage(key: str) -> list[tuple[Labels, Any]]:
        return [({"stage": name}, s[key]) for name, s in stages.items()]

    single = {"tensorcom_batches_total": "batches", "tensorcom_samples_total": "samples",
              "tensorcom_bytes_total": "bytes", "tensorcom_batches_per_second": "batches_per_s",
              "tensorcom_samples_per_second": "samples_per_s", "tensorcom_uptime_seconds": "seconds",
              "tensorcom_workers": "workers", "tensorcom_server_idle_seconds_total": "idle_s",
              "tensorcom_server_busy_seconds_total": "busy_s"}
    values = {name: [({}, record[key])] for name, key in single.items()}
    values.update({
        "tensorcom_consumers": [({}, len(consumers))],
        "tensorcom_consumer_samples_total": per_consumer("samples"),
        "tensorcom_consumer_samples_per_second": per_consumer("samples_per_s"),
        "tensorcom_consumer_lag_batches": per_consumer("lag"),
        "tensorcom_consumer_data_wait_seconds_total": per_consumer("data_wait_s"),
        "tensorcom_consumer_data_wait_ratio": per_consumer("data_wait"),
        "tensorcom_stage_seconds_total": per_stage("seconds"),
        "tensorcom_stage_share_ratio": per_stage("share"),
        "tensorcom_stage_sample_milliseconds": per_stage("per_sample_ms"),
        "tensorcom_verdict": [({"verdict": record["verdict"]}, 1)] if record["verdict"] else [],
    })
    return values


def metric_families(record: dict) -> list[Family]:
    """Every family of METRICS for a normalized record, in METRICS' order, each with the samples
    whose value is known."""
    values = _values(record)
    return [Family(name, kind, text, [(labels, float(v)) for labels, v in values[name] if v is not None])
            for name, (kind, _, text) in METRICS.items()]
