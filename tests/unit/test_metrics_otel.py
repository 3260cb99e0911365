"""Counters exported to OpenTelemetry (the SDK's in-memory reader), and counting's cost."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from memstore import MemoryStore, Settings, UserMessage
from memstore.errors import MissingExtraError
from memstore.metrics import COUNTERS, Metrics, otel_listener

metrics_sdk = pytest.importorskip("opentelemetry.sdk.metrics")
export_sdk = pytest.importorskip("opentelemetry.sdk.metrics.export")


def exported(reader: Any) -> dict[str, tuple[int, dict[str, Any]]]:
    """``instrument name -> (value, attributes)`` of every data point the reader holds."""
    points: dict[str, tuple[int, dict[str, Any]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    points[metric.name] = (point.value, dict(point.attributes))
    return points


@pytest.fixture
def reader() -> Any:
    return export_sdk.InMemoryMetricReader()


@pytest.fixture
def meter(reader: Any) -> Any:
    provider = metrics_sdk.MeterProvider(metric_readers=[reader])
    yield provider.get_meter("memstore-test")
    provider.shutdown()


def test_store_counters_reach_opentelemetry(meter: Any, reader: Any) -> None:
    with MemoryStore(Settings(database_url="sqlite:///:memory:")) as store:
        store.migrate()
        store.enable_otel(meter, {"service.instance.id": "replica-1"})
        store.enable_otel(meter)  # a second call does nothing (no double counting)
        store.append("app", [UserMessage(text="hi")])
        memory = store.memory("app")
        memory.messages()
        memory.messages()
        snapshot = store.metrics()
    points = exported(reader)
    assert points["memstore.cache_hits"] == (1, {"service.instance.id": "replica-1"})
    assert points["memstore.cache_misses"][0] == snapshot["cache_misses"] == 1
    assert points["memstore.cache_rebuilds"][0] == 1
    assert all(name.startswith("memstore.") for name in points)


def test_stores_on_one_meter_add_to_the_same_instruments(meter: Any, reader: Any) -> None:
    first, second = Metrics(), Metrics()
    first.add_listener(otel_listener(meter))
    second.add_listener(otel_listener(meter))
    first.incr("cache_hits", 2)
    second.incr("cache_hits", 3)
    assert exported(reader)["memstore.cache_hits"] == (5, {})


def test_the_setting_exports_to_the_global_meter(
    monkeypatch: pytest.MonkeyPatch, meter: Any, reader: Any
) -> None:
    from opentelemetry import metrics as otel_metrics

    monkeypatch.setattr(otel_metrics, "get_meter", lambda *args, **kwargs: meter)
    settings = Settings.from_env({"MEMSTORE_OTEL_METRICS": "true"}, database_url="sqlite://")
    with MemoryStore(settings) as store:
        store._metrics.incr("id_collisions")
    assert exported(reader)["memstore.id_collisions"] == (1, {})


def test_without_the_extra_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(MissingExtraError) as caught:
        otel_listener()
    assert caught.value.extra == "otel"
    assert caught.value.install == "pip install 'memstore[otel]'"


def test_a_failing_exporter_never_reaches_the_caller() -> None:
    metrics = Metrics()

    def broken(name: str, amount: int) -> None:
        raise RuntimeError("exporter down")

    metrics.add_listener(broken)
    metrics.incr("cache_hits")
    assert metrics.snapshot()["cache_hits"] == 1
    with pytest.raises(KeyError):
        metrics.incr("not_a_counter")
    assert list(metrics.snapshot()) == list(COUNTERS)
