"""The Temporal SDK's own metrics (schedule-to-start latency, slots, polls) in the process's
prometheus_client registry, so one scrape of the worker's /metrics holds them beside reelqueue_*.

The SDK's Runtime records into a MetricBuffer; `SdkMetrics` drains it (on every scrape and every few
seconds, so the buffer never fills) and keeps the totals: counters add up, gauges keep their last
value, histogram observations fall into buckets. Durations are in seconds.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    MetricBuffer,
    MetricBufferDurationFormat,
    Runtime,
    TelemetryConfig,
)

from telemetry import core_logs

# The worker-tuning signals among them (docs/metrics.md, the dashboard's "Temporal SDK" row), by kind.
# Every run of a worker reports these; IDLE_SIGNALS appear once a poll has come back empty (a quiet queue).
TUNING_SIGNALS = {
    "temporal_workflow_task_schedule_to_start_latency": "histogram",
    "temporal_activity_schedule_to_start_latency": "histogram",
    "temporal_worker_task_slots_available": "gauge",
    "temporal_worker_task_slots_used": "gauge",
    "temporal_workflow_task_queue_poll_succeed": "counter",
    "temporal_num_pollers": "gauge",
    "temporal_workflow_task_queue_poll_empty": "counter",
    "temporal_activity_poll_no_task": "counter",
}
IDLE_SIGNALS = ("temporal_workflow_task_queue_poll_empty", "temporal_activity_poll_no_task")
BUFFER_SIZE = 200_000
DRAIN_EVERY_S = 5.0
# Seconds: schedule-to-start and poll latencies are milliseconds when healthy, minutes when starved.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
Labels = tuple[tuple[str, str], ...]


class SdkMetrics(Collector):
    """A prometheus_client collector over a Runtime's MetricBuffer."""

    def __init__(self, buffer: MetricBuffer):
        self._buffer = buffer
        self._lock = threading.Lock()
        self._help: dict[str, str] = {}
        self._counters: dict[str, dict[Labels, float]] = {}
        self._gauges: dict[str, dict[Labels, float]] = {}
        self._histograms: dict[str, dict[Labels, list[float]]] = {}  # bucket counts..., sum

    def drain(self) -> None:
        with self._lock:
            for update in self._buffer.retrieve_updates():
                self._add(update.metric, update.value, update.attributes)

    def _add(self, metric: Any, value: float, attributes: Any) -> None:
        name = metric.name
        self._help.setdefault(name, metric.description or name)
        labels = tuple(sorted((k, str(v)) for k, v in attributes.items()))
        if metric.kind == BUFFERED_METRIC_KIND_COUNTER:
            series = self._counters.setdefault(name, {})
            series[labels] = series.get(labels, 0.0) + value
        elif metric.kind == BUFFERED_METRIC_KIND_GAUGE:
            self._gauges.setdefault(name, {})[labels] = value
        else:
            counts = self._histograms.setdefault(name, {}).setdefault(labels, [0.0] * (len(BUCKETS) + 2))
            counts[bisect.bisect_left(BUCKETS, value)] += 1  # last bucket before the sum: +Inf
            counts[-1] += value

    def collect(self) -> Iterator[Metric]:
        self.drain()
        with self._lock:
            for kind, store in ((CounterMetricFamily, self._counters), (GaugeMetricFamily, self._gauges)):
                for name, series in store.items():
                    keys = _keys(series)
                    family = kind(name, self._help[name], labels=keys)
                    for labels, value in series.items():
                        family.add_metric(_values(keys, labels), value)
                    yield family
            for name, series in self._histograms.items():
                keys = _keys(series)
                family = HistogramMetricFamily(name, self._help[name], labels=keys)
                for labels, counts in series.items():
                    cumulative, buckets = 0.0, []
                    for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts[:-1], strict=True):
                        cumulative += count
                        buckets.append((bound, cumulative))
                    family.add_metric(_values(keys, labels), buckets, counts[-1])
                yield family


def _keys(series: dict[Labels, Any]) -> list[str]:
    """Every label any series of the metric has (a series without one gets "")."""
    return sorted({k for labels in series for k, _ in labels})


def _values(keys: list[str], labels: Labels) -> list[str]:
    given = dict(labels)
    return [given.get(k, "") for k in keys]


_installed: Runtime | None = None


def buffered() -> tuple[TelemetryConfig, SdkMetrics]:
    """The telemetry a Runtime records the SDK's metrics into, and the collector that serves them."""
    buffer = MetricBuffer(BUFFER_SIZE, MetricBufferDurationFormat.SECONDS)
    return TelemetryConfig(metrics=buffer), SdkMetrics(buffer)


def install(registry: CollectorRegistry = REGISTRY) -> Runtime:
    """A Runtime recording into a buffer that `registry` serves, drained every few seconds by a
    daemon thread; made the process's default, so clients connected after this use it. Once per
    process (a second call returns the first Runtime)."""
    global _installed
    if _installed is not None:
        return _installed
    telemetry, collector = buffered()
    runtime = core_logs.default_runtime(telemetry)
    registry.register(collector)
    threading.Thread(target=_drain_forever, args=(collector,), name="sdk-metrics", daemon=True).start()
    _installed = runtime
    return runtime


def _drain_forever(collector: SdkMetrics) -> None:
    stop = threading.Event()
    while not stop.wait(DRAIN_EVERY_S):
        collector.drain()
