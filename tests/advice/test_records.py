"""Suggestions from impact records: an improved change at a similar load, worsened fields flagged, cautions."""

import pytest
from django.utils import timezone

from controlplane.advice.selectors import pool_suggestions
from controlplane.impact.models import ImpactFieldChange, ImpactRecord
from controlplane.impact.services import impact_record_change
from tests.advice.builders import running, versions_of, window_rows

pytestmark = pytest.mark.django_db


def measured(pool, before, after, outcome: str, *, qps: float = 10.0) -> ImpactRecord:
    """A record of `before` -> `after` on the pool, as the impact app measures it (its figures and outcome)."""
    record = impact_record_change(kind="publish", pool=pool, actor=None, version_before=before, version_after=after)
    record.status, record.outcome = ImpactRecord.Status.MEASURED, outcome
    record.before = {"qps": {"median": qps, "mean": qps, "p90": qps, "samples": 600}}
    record.outcome_reason = f"P99 {outcome}"
    record.save()
    return record


def by_id(pool) -> dict:
    return {s["id"]: s for s in pool_suggestions(pool=pool, use_cache=False)["suggestions"]}


@pytest.fixture
def world(agent, sre):
    _, (v16, v8, v16_again) = versions_of(agent, [16, 8, 16])
    pool = running(sre, v16_again)
    return pool, v16, v8, v16_again


def test_an_improved_change_at_a_similar_load_is_suggested_again_citing_its_record(world):
    pool, v16, v8, _ = world
    record = measured(pool, v16, v8, "improved")
    window_rows(pool.name, qps=10.5)
    found = by_id(pool)["record-batch.max_size"]
    assert found["changes"] == [{"path": "batch.max_size", "from": 16, "to": 8, "apply": "hot"}]
    assert [r["id"] for r in found["records"]] == [record.pk]
    assert found["records"][0]["link"].endswith(f"/{record.pk}/")
    assert f"Record {record.pk}" in found["text"] and found["is_actionable"]


def test_no_record_suggestion_at_a_different_load_or_when_the_version_already_has_it(world, sre):
    pool, v16, v8, _ = world
    measured(pool, v16, v8, "improved", qps=30.0)  # 10 QPS now is a third of the load the record saw
    window_rows(pool.name)
    assert "record-batch.max_size" not in by_id(pool)
    measured(pool, v16, v8, "improved")
    assert "record-batch.max_size" in by_id(pool)
    other = running(sre, v8, name="canary")
    measured(other, v16, v8, "improved")
    window_rows(other.name)
    assert "record-batch.max_size" not in by_id(other)  # it runs 8 already


def test_records_of_other_pools_unmeasured_or_unchanged_ones_say_nothing(world, sre):
    pool, v16, v8, _ = world
    other = running(sre, v8, name="canary")
    measured(other, v16, v8, "improved")
    impact_record_change(kind="publish", pool=pool, actor=None, version_before=v16, version_after=v8)  # pending
    measured(pool, v16, v8, "no_change")
    window_rows(pool.name)
    assert by_id(pool) == {}


def test_a_field_whose_change_worsened_the_pool_is_flagged_and_cautions_a_rule_moving_it_the_same_way(world):
    pool, v16, v8, _ = world
    record = measured(pool, v16, v8, "worsened")
    window_rows(pool.name, batch_idle_ratio=0.3)  # the batch-idle rule lowers batch.max_size, as the record did
    found = by_id(pool)
    flag = found["worsened-batch.max_size"]
    assert not flag["is_actionable"] and flag["records"][0]["id"] == record.pk
    assert [c["id"] for c in found["batch-idle"]["cautions"]] == [record.pk]


def test_a_worsened_change_the_other_way_is_no_caution(world):
    pool, _, v8, v16_again = world
    measured(pool, v8, v16_again, "worsened")  # raising it worsened things; lowering it is not the same move
    window_rows(pool.name, batch_idle_ratio=0.3)
    assert by_id(pool)["batch-idle"]["cautions"] == []


def test_a_replay_comparison_that_improved_at_the_replayed_rate_counts(world, agent):
    pool, v16, v8, _ = world
    record = ImpactRecord.objects.create(  # the shape impact.comparisons writes: the runs' figures, QPS in `load`
        kind=ImpactRecord.Kind.REPLAY_COMPARISON,
        pool=pool,
        pool_name=pool.name,
        version_before=v16,
        version_after=v8,
        actor=agent,
        actor_name="agent",
        changed_at=timezone.now(),
        window_before_s=0,
        window_after_s=0,
        status=ImpactRecord.Status.MEASURED,
        before={"latency.e2e_s.p99": {"median": 1.9}},
        load={"qps_before": 9.5, "qps_after": 9.6},
        outcome=ImpactRecord.Outcome.IMPROVED,
        outcome_reason="P99 1.9 s -> 1.4 s beyond noise",
    )
    ImpactFieldChange.objects.create(record=record, path="batch.max_size", old=16, new=8, apply="hot")
    window_rows(pool.name)
    found = by_id(pool)["record-batch.max_size"]
    assert found["records"][0]["kind"] == "replay_comparison" and found["changes"][0]["to"] == 8
