"""History API: columns of figures over a time range, at the resolution the range calls for."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from controlplane.metrics.models import MetricSample
from tests.metrics.conftest import sample_m
from tests.metrics.factories import second_rows

pytestmark = pytest.mark.django_db


def history(client, scope: str, name: str, **query):
    return client.get(reverse("api:metric-history", kwargs={"scope": scope, "name": name}), query)


def test_the_last_five_minutes_come_from_second_rows(api_for, fleet_nodes):
    now = datetime.now(UTC).replace(microsecond=0)
    second_rows(scope="node", name="gpu-1", pool="prod-main", start=now - timedelta(seconds=3),
                values=[sample_m(qps=float(i), gpu_util=None) for i in range(3)])  # fmt: skip
    second_rows(scope="node", name="gpu-1", start=now - timedelta(minutes=10), values=[sample_m(qps=99.0)])
    response = history(api_for("agent"), "node", "gpu-1", metric="qps,gpu_util,length_hist,length_hist.gt2k")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["resolution_s"] == 1
    assert body["until"] - body["since"] == pytest.approx(300)
    assert body["t"] == [(now - timedelta(seconds=3 - i)).timestamp() for i in range(3)]
    assert body["values"]["qps"] == [0.0, 1.0, 2.0]
    assert body["values"]["gpu_util"] == [None, None, None]
    assert body["values"]["length_hist"][0] == sample_m()["length_hist"]
    assert body["values"]["length_hist.gt2k"] == [0, 0, 0]


def test_a_pools_share_below_the_floor_and_a_confidence_bucket_are_read_like_any_figure(api_for, fleet_nodes):
    now = datetime.now(UTC).replace(microsecond=0)
    second_rows(scope="pool", name="prod-main", pool="prod-main", start=now - timedelta(seconds=2),
                values=[sample_m(intent_below_floor_share=share) for share in (0.25, 0.5)])  # fmt: skip
    metric = "intent_classified,intent_below_floor_share,intent_confidence_hist.90-100"
    response = history(api_for("agent"), "pool", "prod-main", metric=metric)
    assert response.status_code == 200, response.json()
    values = response.json()["values"]
    assert values["intent_below_floor_share"] == [0.25, 0.5]
    assert values["intent_classified"] == [12, 12] and values["intent_confidence_hist.90-100"] == [9, 9]


def test_a_day_comes_from_minute_rows(api_for, fleet_nodes):
    now = time.time()
    for hours in (1, 20, 30):
        MetricSample.objects.create(
            scope="pool",
            name="prod-main",
            pool="prod-main",
            t=datetime.fromtimestamp(now - hours * 3600, tz=UTC),
            resolution_s=60,
            values={"qps": float(hours)},
        )
    body = history(api_for("oncall"), "pool", "prod-main", metric="qps", since=now - 86400, until=now).json()
    assert body["resolution_s"] == 60
    assert body["values"]["qps"] == [20.0, 1.0]


def test_iso_times_are_accepted(api_for, fleet_nodes):
    response = history(api_for("sre"), "fleet", "fleet", metric="qps", since="2026-05-01T12:00:00Z",
                       until="2026-05-01T12:30:00")  # fmt: skip
    assert response.status_code == 200
    assert response.json()["since"] == datetime(2026, 5, 1, 12, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("scope", "name", "query", "status", "error"),
    [
        ("node", "gpu-1", {}, 400, "metric: This field is required."),
        ("node", "gpu-1", {"metric": "qps,gpu_temp"}, 400, "metric: unknown figure 'gpu_temp'"),
        ("node", "gpu-1", {"metric": "qps", "since": "yesterday"}, 400, "since: expected unix seconds or an ISO"),
        ("node", "gpu-1", {"metric": "qps", "since": "200", "until": "100"}, 400, "since: must be before until"),
        ("node", "gpu-1", {"metric": "qps", "since": "0", "until": "1e9"}, 400, "since: the range may span at most"),
        ("node", "gpu-1", {"metric": "qps", "format": "csv"}, 400, "format: unknown field"),
        ("node", "gpu-9", {"metric": "qps"}, 404, "no metrics for node/gpu-9"),
        ("pool", "nowhere", {"metric": "qps"}, 404, "no metrics for pool/nowhere"),
        ("fleet", "gpu-1", {"metric": "qps"}, 404, "no metrics for fleet/gpu-1"),
        ("nodes", "gpu-1", {"metric": "qps"}, 404, "no metrics for nodes/gpu-1"),
    ],
)
def test_bad_queries_name_what_is_wrong(api_for, fleet_nodes, scope, name, query, status, error):
    response = history(api_for("oncall"), scope, name, **query)
    assert response.status_code == status
    assert error in response.json()["error"], response.json()
