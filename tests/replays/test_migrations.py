"""Migrations of replay runs keep what was stored: ladder runs judged before runs carried their own P99 line get the
line they were judged against (1.8 s); other runs get none."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from controlplane.nodes.models import Pool

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("replays", "0004_first_round_and_ladder")]
AFTER = [("replays", "0005_replayrun_slo_p99_s")]


def test_earlier_ladders_get_the_line_they_were_judged_against(agent):
    pool = Pool.objects.create(name="staging")
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("replays", "ReplayRun")
    common = {"pool_id": pool.pk, "created_by_id": agent.pk, "reason": "before", "duration_cap_s": 30}
    ladder = old.objects.create(pacing="ladder", qps_steps=[10, 20], step_s=15, **common)
    at_qps = old.objects.create(pacing="qps", qps=10, **common)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps.get_model("replays", "ReplayRun")
    assert new.objects.get(pk=ladder.pk).slo_p99_s == 1.8
    assert new.objects.get(pk=at_qps.pk).slo_p99_s is None
