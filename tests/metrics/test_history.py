"""The minute rollup and retention, as the beat schedule runs them."""

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings

from controlplane.metrics import tasks
from controlplane.metrics.models import MetricSample
from controlplane.metrics.services.history import metric_samples_expire, metric_samples_roll_up
from tests.metrics.conftest import sample_m
from tests.metrics.factories import second_rows

pytestmark = pytest.mark.django_db

MINUTE_START = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def minute_rows():
    return MetricSample.objects.filter(resolution_s=60).order_by("scope", "name", "t")


def test_each_complete_minute_becomes_one_row_per_entity():
    # 12:00 has 60 seconds of gpu-1 and of the fleet; 12:01 is still running at 12:01:30.
    second_rows(scope="node", name="gpu-1", pool="prod-main", start=MINUTE_START,
                values=[sample_m(qps=float(i % 2 * 2), engine_restarts=i // 30) for i in range(90)])  # fmt: skip
    second_rows(scope="fleet", name="fleet", start=MINUTE_START, values=[{"nodes": 1, "qps": 1.0}] * 60)
    written = metric_samples_roll_up(now=MINUTE_START + timedelta(minutes=1, seconds=30))
    assert written == 2
    node, fleet = (minute_rows().get(scope=s) for s in ("node", "fleet"))
    assert (node.name, node.pool, node.t, node.resolution_s) == ("gpu-1", "prod-main", MINUTE_START, 60)
    assert node.values["samples"] == 60
    assert node.values["qps"] == pytest.approx(1.0)  # mean of 0, 2, 0, 2, ...
    assert node.values["engine_restarts"] == 1  # the counter's last value, not a sum
    assert node.values["length_hist"]["le256"] == 6 * 60  # buckets add up
    assert fleet.values == {"samples": 60, "nodes": 1.0, "qps": 1.0}


def test_rollup_is_idempotent_and_catches_up_missed_minutes():
    second_rows(scope="node", name="gpu-1", start=MINUTE_START, values=[sample_m()] * 240)  # 12:00-12:03
    assert metric_samples_roll_up(now=MINUTE_START + timedelta(minutes=1, seconds=11)) == 1
    assert metric_samples_roll_up(now=MINUTE_START + timedelta(minutes=1, seconds=50)) == 0
    # The worker was down for two minutes: the next run rolls 12:01, 12:02 and 12:03.
    assert metric_samples_roll_up(now=MINUTE_START + timedelta(minutes=4, seconds=11)) == 3
    assert [row.t.minute for row in minute_rows()] == [0, 1, 2, 3]


def test_a_minute_is_not_rolled_up_before_its_late_samples_can_arrive():
    second_rows(scope="node", name="gpu-1", start=MINUTE_START, values=[sample_m()] * 60)
    assert metric_samples_roll_up(now=MINUTE_START + timedelta(minutes=1, seconds=5)) == 0
    assert metric_samples_roll_up(now=MINUTE_START + timedelta(minutes=1, seconds=10)) == 1


def test_retention_deletes_old_rows_of_each_resolution(settings):
    settings.METRICS_RAW_RETENTION_S = 3600
    settings.METRICS_ROLLUP_RETENTION_S = 7 * 86400
    now = MINUTE_START
    second_rows(scope="node", name="gpu-1", start=now - timedelta(hours=1, seconds=2), values=[sample_m()] * 4)
    for age in (timedelta(days=7, minutes=1), timedelta(days=6)):
        MetricSample.objects.create(scope="fleet", name="fleet", t=now - age, resolution_s=60, values={"qps": 1})
    assert metric_samples_expire(now=now) == {1: 2, 60: 1}
    assert MetricSample.objects.filter(resolution_s=1).count() == 2
    assert MetricSample.objects.get(resolution_s=60).t == now - timedelta(days=6)


def test_retention_follows_the_environment_settings(settings):
    settings.METRICS_RAW_RETENTION_S = 120
    second_rows(scope="node", name="gpu-1", start=MINUTE_START - timedelta(seconds=200), values=[sample_m()] * 200)
    assert metric_samples_expire(now=MINUTE_START)[1] == 80


def test_the_beat_schedule_runs_rollup_and_retention_every_minute():
    schedule = {entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert schedule["controlplane.metrics.tasks.metrics_roll_up_task"] == 60.0
    assert schedule["controlplane.metrics.tasks.metrics_expire_task"] == 60.0
    now = datetime.now(UTC)
    second_rows(scope="fleet", name="fleet", start=now - timedelta(hours=2), values=[{"qps": 1.0}])
    three_minutes_ago = (now - timedelta(minutes=3)).replace(second=0, microsecond=0)
    second_rows(scope="fleet", name="fleet", start=three_minutes_ago, values=[{"qps": 2.0}] * 60)
    tasks.metrics_roll_up_task.apply()
    tasks.metrics_expire_task.apply()
    assert MetricSample.objects.filter(resolution_s=1, t__lt=now - timedelta(hours=1)).count() == 0
    assert MetricSample.objects.get(resolution_s=60).values["qps"] == 2.0
