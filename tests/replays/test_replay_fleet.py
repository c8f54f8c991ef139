"""A replay run end to end: a generated log replayed open loop through three simulator agents' gateways (real agents,
real daphne, Postgres/Redis as configured), one row per request with the gateway's decision; then a cancel.

The nodes are simulated (engine_node.simulator): the latencies here are the simulator's, not vLLM measurements.
"""

import time

import pytest
from django.db.models import Count

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import ClientKey, EngineNode
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.replays.models import ReplayRequest, ReplayRun
from controlplane.replays.services import replay_run_cancel, replay_run_create
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, wait_until
from tests.factories import template_with_versions
from tests.live_server import Daphne
from tests.replays.logs import log_lines, store_log

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]


@pytest.fixture
def fleet(tmp_path, sre, settings):
    settings.CONVERSATION_LOG_DIR = tmp_path / "logs"
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    server = Daphne(tmp_path)
    server.start()
    pool = pool_create(actor=sre, name="staging", is_production=False)
    agents = []
    try:
        for i in range(3):
            node, token = node_create(actor=sre, name=f"sim-{i + 1}", pool=pool)
            agent = AgentProcess(
                name=node.name, token=token, control_plane_url=server.ws_agent_url, work=tmp_path, profile=profile
            )
            agent.start()
            agents.append(agent)
        _, (version,) = template_with_versions(sre)
        pool_publish(actor=sre, pool=pool, version=version, reason="replay target")
        wait_until(
            lambda: (
                EngineNode.objects.filter(is_connected=True, reported_status="online", applied_version=version)
                .exclude(gateway_url="")
                .count()
                == 3
            ),
            60,
            "three online nodes running the version",
        )
        yield {"pool": pool, "agents": agents, "version": version}
    finally:
        for agent in agents:
            agent.stop()
        server.stop()


def test_a_log_replayed_through_three_gateways_gives_one_row_per_request(fleet, agent):
    log = store_log(agent, log_lines(40, turns=2))
    run = replay_run_create(
        actor=agent,
        pool=fleet["pool"],
        log=log,
        reason="baseline before raising the cap",
        label="baseline",
        qps=20,
        arrival="uniform",
        duration_cap_s=60,
    )
    run = wait_until(
        lambda: (r := ReplayRun.objects.get(pk=run.pk)).status in ReplayRun.FINISHED and r, 60, "the run to finish"
    )
    assert run.status == "succeeded", run.error
    assert (run.planned, run.sent, run.done, run.errors) == (80, 80, 80, 0)
    rows = ReplayRequest.objects.filter(run=run)
    assert rows.count() == 80 and rows.filter(ok=True).count() == 80
    assert sorted(rows.values_list("seq", flat=True)) == list(range(80))
    per_node = dict(rows.values_list("node_name").annotate(n=Count("pk")))
    assert per_node == {"sim-1": 27, "sim-2": 27, "sim-3": 26}
    first = rows.get(seq=0)
    assert first.conversation_id == "c0" and first.turn == 0
    assert first.tier in ("strict", "normal", "creative") and first.tier_rule
    assert first.max_tokens == 256 and first.ttft_s is not None and first.e2e_s >= first.ttft_s
    assert first.reply_tokens and first.prompt_tokens and first.continuation_rounds is not None
    for row in rows:
        assert row.ttft_s <= row.first_round_s <= row.e2e_s
        assert (row.first_round_s < row.e2e_s) == (row.continuation_rounds > 0), row
    # The order-number message is decided by the strict regexes; the classifier names an intent for most.
    assert rows.filter(conversation_id="c0", turn=0).get().tier == "strict"
    assert rows.exclude(intent="").exists()
    # Open loop at 20 QPS: the run records what it achieved and how late it sent (bench/replay.py measures both).
    assert run.asked_qps == 20
    assert run.achieved_qps > 0 and run.send_lag_p99_s is not None and run.send_lag_p99_s >= 0
    assert run.generator_cpu_s > 0 and run.p99_s is not None
    assert run.template_version == fleet["version"] and run.template_hash == fleet["version"].content_hash
    assert sorted(t["name"] for t in run.targets) == ["sim-1", "sim-2", "sim-3"]
    # Its own client key, revoked at the end; the run's audit trail.
    key = ClientKey.objects.get(pk=run.client_key_id)
    assert key.name == f"replay-{run.pk}" and key.revoked_at is not None
    assert set(
        AuditEntry.objects.filter(target_id=str(run.pk), action__startswith="replay.").values_list("action", flat=True)
    ) == {"replay.create"}
    assert "figures" in run.pool_metrics and run.pool_metrics["simulated_nodes"] == 3


def test_a_cancelled_run_stops_sending_and_keeps_its_rows(fleet, agent):
    log = store_log(agent, log_lines(400))
    run = replay_run_create(
        actor=agent, pool=fleet["pool"], log=log, reason="cancel me", qps=20, arrival="uniform", duration_cap_s=60
    )
    wait_until(lambda: ReplayRun.objects.get(pk=run.pk).done >= 20, 30, "some requests done")
    replay_run_cancel(actor=agent, run=run, reason="wrong pool")
    run = wait_until(
        lambda: (r := ReplayRun.objects.get(pk=run.pk)).status == "cancelled" and r, 10, "the run to be cancelled"
    )
    rows = ReplayRequest.objects.filter(run=run)
    assert run.planned == 400 and 20 <= run.sent < 80
    assert rows.count() == run.sent == run.done
    assert AuditEntry.objects.filter(action="replay.cancel", target_id=str(run.pk)).count() == 1
    time.sleep(1)  # 20 more requests were due in this second had the run kept sending
    assert ReplayRequest.objects.filter(run=run).count() == run.sent
    assert ReplayRun.objects.get(pk=run.pk).sent == run.sent
    assert ClientKey.objects.get(pk=run.client_key_id).revoked_at is not None
