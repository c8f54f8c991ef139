"""Impact records: every change service writes one, the window figures and the conclusions they get."""

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.impact.models import ImpactRecord
from controlplane.impact.services import impact_record_change, impact_record_measure, impact_records_measure_due
from controlplane.metrics.models import MetricSample
from controlplane.nodes.services.pools import pool_publish, pool_rollback
from controlplane.operations.degradation import degradation_disable, degradation_enable
from tests.factories import pools, template_with_versions

pytestmark = pytest.mark.django_db


@pytest.fixture
def staging(sre):
    return pools(sre)[0]


@pytest.fixture
def versions(agent):
    return template_with_versions(agent, temperatures=(0.3, 0.2))[1]


def pool_rows(pool: str, start, seconds: int, *, p99: float, qps: float, nodes: int = 3, jitter: float = 0.02):
    """1 s pool rows from `start`, with a small deterministic wobble so the noise test has a spread to look at."""
    rows = []
    for i in range(seconds):
        wobble = ((i * 7) % 11 - 5) / 5 * jitter
        values = {
            "nodes": nodes,
            "qps": qps * (1 + wobble),
            "latency_p50_s": p99 / 3 * (1 + wobble),
            "latency_p99_s": p99 * (1 + wobble),
            "latency_p999_s": p99 * 1.2 * (1 + wobble),
            "error_rate": 0.0,
            "kv_cache_usage": 0.5,
            "batch_efficiency": 0.8,
            "batch_idle_ratio": 0.1,
            "spec_acceptance_rate": None,
            "long_request_share": 0.03,
            "fragmentation_ratio": 0.1,
        }
        rows.append(
            MetricSample(
                scope="pool", name=pool, pool=pool, t=start + timedelta(seconds=i), resolution_s=1, values=values
            )
        )
    MetricSample.objects.bulk_create(rows)


def test_publish_and_rollback_write_records_with_the_field_diff(sre, staging, versions):
    v1, v2 = versions
    pool_publish(actor=sre, pool=staging, version=v1, reason="first")
    pool_publish(actor=sre, pool=staging, version=v2, reason="cooler strict tier")
    pool_rollback(actor=sre, pool=staging, reason="back")
    records = list(ImpactRecord.objects.order_by("id"))
    assert [r.kind for r in records] == ["publish", "publish", "rollback"]
    second = records[1]
    assert (second.version_before, second.version_after, second.template_id) == (v1, v2, v1.template_id)
    assert (second.actor, second.actor_name, second.reason, second.status) == (
        sre,
        "sre",
        "cooler strict tier",
        "pending",
    )
    assert [(c.path, c.old, c.new) for c in second.field_changes.all()] == [("temperature.strict", 0.3, 0.2)]
    assert [(c.path, c.old, c.new) for c in records[2].field_changes.all()] == [("temperature.strict", 0.2, 0.3)]


def test_degradation_on_and_off_are_recorded(sre, staging, versions):
    pool_publish(actor=sre, pool=staging, version=versions[0], reason="first")
    degradation_enable(actor=sre, pool=staging, reason="peak")
    degradation_disable(actor=sre, pool=staging, reason="calm")
    kinds = list(ImpactRecord.objects.order_by("id").values_list("kind", "reason", "version_before"))
    assert kinds[1:] == [("degradation_on", "peak", versions[0].pk), ("degradation_off", "calm", versions[0].pk)]


def test_a_failing_record_never_fails_the_change(sre, staging, versions, monkeypatch, caplog):
    def broken(**kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr("controlplane.impact.services._create", broken)
    release = pool_publish(actor=sre, pool=staging, version=versions[0], reason="first")
    assert release.pk and not ImpactRecord.objects.exists()
    assert "impact record for publish on staging not written" in caplog.text


def _record_at(staging, at, sre):
    return impact_record_change(kind="publish", pool=staging, actor=sre, reason="r", changed_at=at)


def test_a_record_is_measured_only_once_its_after_window_has_passed(sre, staging, settings):
    settings.IMPACT_WINDOW_BEFORE_S = settings.IMPACT_WINDOW_AFTER_S = 60
    settings.IMPACT_MIN_SAMPLES = 30
    now = timezone.now().replace(microsecond=0)
    at = now - timedelta(seconds=30)
    pool_rows("staging", at - timedelta(seconds=60), 60, p99=0.5, qps=20)
    pool_rows("staging", at, 30, p99=1.5, qps=20)
    record = _record_at(staging, at, sre)
    assert impact_records_measure_due(now=now) == 0
    assert ImpactRecord.objects.get(pk=record.pk).status == "pending"
    pool_rows("staging", at + timedelta(seconds=30), 30, p99=1.5, qps=20)
    assert impact_records_measure_due(now=now + timedelta(seconds=31)) == 1
    record.refresh_from_db()
    assert (record.status, record.outcome) == ("measured", "worsened")
    assert record.conclusions["latency_p99_s"]["verdict"] == "worsened"
    assert record.conclusions["qps"]["verdict"] == "no_change"
    assert record.before["latency_p99_s"]["samples"] == 60 and record.after["latency_p99_s"]["samples"] == 60
    assert record.load["qps_ratio"] == pytest.approx(1.0, abs=0.02)
    assert "P99 latency 0.5 → 1.5 (worsened" in record.outcome_reason
    assert impact_record_measure(record_id=record.pk, now=now + timedelta(seconds=60)).measured_at == record.measured_at


@pytest.mark.parametrize(
    ("after", "outcome", "reason"),
    [
        ({"p99": 0.3, "qps": 20}, "improved", "improved"),
        ({"p99": 0.5, "qps": 20}, "no_change", "no change"),
        ({"p99": 0.3, "qps": 40}, "inconclusive", "load shifted: 20.00 QPS before, 40.00 after (ratio 2.00"),
        (
            {"p99": 0.3, "qps": 20, "nodes": 2},
            "inconclusive",
            "nodes lost: the pool reported 3 nodes before and 2 after",
        ),
    ],
)
def test_conclusions(sre, staging, settings, after, outcome, reason):
    settings.IMPACT_WINDOW_BEFORE_S = settings.IMPACT_WINDOW_AFTER_S = 60
    settings.IMPACT_MIN_SAMPLES = 30
    at = timezone.now().replace(microsecond=0) - timedelta(seconds=120)
    pool_rows("staging", at - timedelta(seconds=60), 60, p99=0.5, qps=20)
    pool_rows("staging", at, 60, **after)
    record = impact_record_measure(record_id=_record_at(staging, at, sre).pk)
    assert record.outcome == outcome
    assert reason in record.outcome_reason


def test_thin_data_is_inconclusive(sre, staging, settings):
    settings.IMPACT_WINDOW_BEFORE_S = settings.IMPACT_WINDOW_AFTER_S = 60
    settings.IMPACT_MIN_SAMPLES = 30
    at = timezone.now().replace(microsecond=0) - timedelta(seconds=120)
    pool_rows("staging", at - timedelta(seconds=60), 60, p99=0.5, qps=20)
    pool_rows("staging", at, 12, p99=2.0, qps=20)
    record = impact_record_measure(record_id=_record_at(staging, at, sre).pk)
    assert record.outcome == "inconclusive"
    assert record.outcome_reason == "too few samples: 60 1 s samples before and 12 after (at least 30 each)"


def test_the_after_window_starts_once_the_change_has_settled(sre, staging, settings):
    settings.IMPACT_WINDOW_BEFORE_S = settings.IMPACT_WINDOW_AFTER_S = 60
    settings.IMPACT_SETTLE_S = 20
    settings.IMPACT_MIN_SAMPLES = 30
    at = timezone.now().replace(microsecond=0) - timedelta(seconds=100)
    pool_rows("staging", at - timedelta(seconds=60), 60, p99=0.5, qps=20)
    pool_rows("staging", at, 20, p99=3.0, qps=5)  # engines restarting: slow, and little served
    pool_rows("staging", at + timedelta(seconds=20), 60, p99=0.3, qps=20)
    record = _record_at(staging, at, sre)
    assert record.settle_s == 20 and record.after_until == at + timedelta(seconds=80)
    assert impact_record_measure(record_id=record.pk, now=at + timedelta(seconds=79)).status == "pending"
    record = impact_record_measure(record_id=record.pk, now=at + timedelta(seconds=80))
    assert (record.outcome, record.after["latency_p99_s"]["samples"]) == ("improved", 60)
    assert record.load["qps_ratio"] == pytest.approx(1.0, abs=0.02)


def test_other_changes_inside_the_windows_are_named(sre, staging, settings, client):
    settings.IMPACT_WINDOW_BEFORE_S = settings.IMPACT_WINDOW_AFTER_S = 60
    settings.IMPACT_MIN_SAMPLES = 30
    at = timezone.now().replace(microsecond=0) - timedelta(seconds=200)
    pool_rows("staging", at - timedelta(seconds=60), 120, p99=0.5, qps=20)
    record = _record_at(staging, at, sre)
    inside = impact_record_change(kind="degradation_on", pool=staging, actor=sre, changed_at=at + timedelta(seconds=30))
    impact_record_change(kind="cleanup", pool=staging, actor=sre, changed_at=at + timedelta(seconds=90))  # after
    record = impact_record_measure(record_id=record.pk)
    assert record.load["overlapping"] == [inside.pk]
    client.force_login(sre)
    html = client.get(f"/impact/{record.pk}/").content.decode()
    assert f'share the credit: <a href="/impact/{inside.pk}/">#{inside.pk}</a>.' in html
