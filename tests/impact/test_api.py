"""The impact-record API: filters by field, pool, kind, outcome and time; bad filters name the field."""

import pytest

from controlplane.impact.models import ImpactRecord
from controlplane.nodes.services.pools import pool_publish, pool_rollback
from tests.factories import pools, template_with_versions

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(sre, agent):
    staging, _ = pools(sre)
    v1, v2 = template_with_versions(agent, temperatures=(0.3, 0.2))[1]
    pool_publish(actor=sre, pool=staging, version=v1, reason="first")
    pool_publish(actor=sre, pool=staging, version=v2, reason="cooler strict tier")
    pool_rollback(actor=sre, pool=staging, reason="customers complained")
    ImpactRecord.objects.filter(reason="cooler strict tier").update(status="measured", outcome="worsened")
    return v1, v2


def test_records_filter_by_field_kind_outcome_and_pool(api_for, history):
    api = api_for("agent")
    body = api.get("/api/v1/impact-records/", {"field": "temperature.strict"}).json()
    assert [r["reason"] for r in body["results"]] == ["customers complained", "cooler strict tier", "first"]
    body = api.get("/api/v1/impact-records/", {"field": "temperature.strict", "kind": "publish"}).json()
    assert [r["reason"] for r in body["results"]] == ["cooler strict tier", "first"]
    worse = api.get("/api/v1/impact-records/", {"outcome": "worsened"}).json()["results"]
    assert len(worse) == 1
    record = worse[0]
    assert (record["pool"], record["template"], record["version_before"], record["version_after"]) == (
        "staging",
        "chat",
        "chat:1",
        "chat:2",
    )
    assert record["changes"] == [{"path": "temperature.strict", "old": 0.3, "new": 0.2, "apply": "hot"}]
    assert record["actor"] == "sre" and record["url"] == f"/impact/{record['id']}/"
    assert api.get("/api/v1/impact-records/", {"pool": "production"}).json()["results"] == []
    # A pool's first version sets every field; later changes list only what they touched.
    first_only = api.get("/api/v1/impact-records/", {"field": "batch.max_size"}).json()["results"]
    assert [(r["reason"], r["version_before"]) for r in first_only] == [("first", None)]
    detail = api.get(f"/api/v1/impact-records/{record['id']}/").json()
    assert detail["reason"] == "cooler strict tier"


def test_time_filters(api_for, history):
    api = api_for("oncall")
    assert len(api.get("/api/v1/impact-records/", {"since": "2000-01-01T00:00:00Z"}).json()["results"]) == 3
    assert api.get("/api/v1/impact-records/", {"until": "2000-01-01T00:00:00"}).json()["results"] == []
    # An offset Python reads and Postgres would refuse is taken in UTC, not a 500.
    assert api.get("/api/v1/impact-records/", {"until": "0733-07-31T22:37:35-21:09"}).json()["results"] == []


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"field": "temperature.nope"}, "field: no parameter field named 'temperature.nope'"),
        ({"kind": "reboot"}, "kind: must be one of publish, rollback"),
        ({"outcome": "great"}, "outcome: must be one of improved"),
        ({"since": "yesterday"}, "since: expected an ISO 8601 date and time, got 'yesterday'"),
        ({"since": "2020-13-01T00:00:00"}, "since: expected an ISO 8601 date and time"),
        ({"since": "0001-01-01T00:00:00+01:00"}, "since: is out of range"),
    ],
)
def test_bad_filters_name_the_field(api_for, history, params, message):
    response = api_for("sre").get("/api/v1/impact-records/", params)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_anonymous_is_refused(api_for, history):
    assert api_for(None).get("/api/v1/impact-records/").status_code == 401
