"""Replay comparisons are impact records too: the outcome is the comparison's own verdict, the diff its versions'."""

import pytest

from controlplane.impact.models import ImpactRecord
from controlplane.replays.comparison_services import replay_comparison_create
from tests.factories import pools, template_with_versions
from tests.replays.factories import finished_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(agent, sre):
    staging = pools(sre)[0]
    v1, v2 = template_with_versions(agent, temperatures=(0.3, 0.2))[1]
    slow = finished_run(actor=agent, pool=staging, version=v1, median_s=1.2, n=800, seed=1)
    fast = finished_run(actor=agent, pool=staging, version=v2, median_s=0.5, n=800, seed=2)
    again = finished_run(actor=agent, pool=staging, version=v1, median_s=1.2, n=800, seed=3)
    return slow, fast, again


def test_a_faster_run_is_an_improvement_beyond_noise(agent, runs):
    slow, fast, _ = runs
    comparison = replay_comparison_create(actor=agent, run_ids=[slow.pk, fast.pk], label="cooler strict tier")
    record = ImpactRecord.objects.get(kind="replay_comparison")
    assert record.source == {"type": "replay_comparison", "id": comparison.pk, "runs": [slow.pk, fast.pk]}
    assert (record.status, record.outcome) == ("measured", "improved")
    assert record.conclusions["latency.e2e_s.p99"]["verdict"] == "improved"
    assert record.outcome_reason == comparison.result["verdict"][0]
    assert (record.version_before, record.version_after, record.actor, record.reason) == (
        slow.template_version,
        fast.template_version,
        agent,
        "cooler strict tier",
    )
    assert [(c.path, c.old, c.new) for c in record.field_changes.all()] == [("temperature.strict", 0.3, 0.2)]
    assert record.before["latency.e2e_s.p99"]["median"] > record.after["latency.e2e_s.p99"]["median"]


def test_a_repeat_of_the_same_version_is_no_change_and_each_compared_run_gets_a_record(agent, runs):
    slow, fast, again = runs
    replay_comparison_create(actor=agent, run_ids=[slow.pk, again.pk, fast.pk])
    records = list(ImpactRecord.objects.filter(kind="replay_comparison").order_by("id"))
    assert [r.source["runs"] for r in records] == [[slow.pk, again.pk], [slow.pk, fast.pk]]
    moved = {k: v for k, v in records[0].conclusions.items() if v["verdict"] != "no_change"}
    assert records[0].outcome == "no_change" and not records[0].field_changes.exists(), moved
    assert records[1].outcome == "improved"


def test_the_comparison_page_of_a_record_links_back(agent, runs, client):
    slow, fast, _ = runs
    comparison = replay_comparison_create(actor=agent, run_ids=[slow.pk, fast.pk])
    record = ImpactRecord.objects.get(kind="replay_comparison")
    client.force_login(agent)
    html = client.get(f"/impact/{record.pk}/").content.decode()
    assert f'href="/replays/comparisons/{comparison.pk}/"' in html
    assert "The same traffic replayed in both runs" in html and 'data-figure="latency.e2e_s.p99"' in html
