"""DataplaneMetrics: the per-call helpers count into the right labelled series."""

from __future__ import annotations

from runtimed.dataplane.metrics import DataplaneMetrics


def _value(metrics: DataplaneMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_lookups_hops_and_calls_count_per_label() -> None:
    metrics = DataplaneMetrics()
    for result in ("hit", "hit", "miss", "hit"):
        metrics.authz_lookup(result)
    metrics.hop("in")
    metrics.hop("out")
    metrics.hop("out")
    metrics.record(code="OK", route="local", seconds=0.002)
    metrics.record(code="OK", route="local", seconds=0.004)
    metrics.record(code="RESOURCE_EXHAUSTED", route="local", seconds=0.001)
    assert _value(metrics, "runtimed_authz_cache_lookups_total", result="hit") == 3
    assert _value(metrics, "runtimed_authz_cache_lookups_total", result="miss") == 1
    assert _value(metrics, "runtimed_proxied_hops_total", direction="in") == 1
    assert _value(metrics, "runtimed_proxied_hops_total", direction="out") == 2
    assert _value(metrics, "runtimed_invocations_total", code="OK", route="local") == 2
    assert (
        _value(metrics, "runtimed_invocations_total", code="RESOURCE_EXHAUSTED", route="local") == 1
    )
    assert _value(metrics, "runtimed_invocation_duration_seconds_count", route="local") == 3
