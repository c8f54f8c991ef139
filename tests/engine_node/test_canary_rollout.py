"""Canary rollouts on three agents running the simulator, against the real control plane (daphne, Redis, Postgres).

The pool rolls out in two stages, one node and then the whole pool, each held for a short analysis window; the
analysis runs in this process (a thread calling the periodic task's function, as the beat schedule would every 2 s).
A version that is genuinely slower is rolled back automatically after its first stage, with the evidence and without
a failed request; a harmless version is promoted through both stages to every node. The rollback also runs with the
agents split over two daphne processes (the canary on one, part of its baseline on the other): the analysis reads
what both processes stored, and the rollback's push reaches the canary through the shared channel layer.
"""

import pytest

from controlplane.alerts.services.rules import alert_rule_create
from controlplane.audit.models import AuditEntry
from controlplane.metrics.models import MetricSample
from controlplane.metrics.selectors import latest_values
from controlplane.nodes.models import EngineNode, Pool, Rollout
from controlplane.nodes.services.canary_settings import pool_canary_update
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.nodes.services.rollouts import rollouts_analyse
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node.fleet import AgentProcess, Traffic, log_tail, start_agents, stop_agents, wait_until
from tests.live_server import daphnes
from tests.periodic import Periodic

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

# The simulated checkpoint also ships an fp8 variant whose every engine step costs 10× as much: on this profile a
# 16-token reply takes ~0.1 s on the default engine and ~1 s with `engine.quantization: fp8`. That is the simulator's
# own latency model at work (LatencyModel multiplies each step by the quantization's factor), not an injected fault.
# The slower version's test sets the pool's P99 lines at 0.4 s and 0.6 s (the p99-latency rule, which the analysis
# reads), so the canary's P99 is above the critical line for as long as it runs the new version, while each of its
# replies still ends well inside a 2 s sample window: every sample carries the canary's P99, however busy the
# machine (a reply longer than the window would leave samples with none, and the canary would read as slow rather
# than as above the line: canary_analysis.py).
SLOW_FP8_PROFILE = """
supported_quantizations:
  fp8: 10
latency:
  time_scale: 0.5
reply_length:
  median: 14
  sigma: 0.2
  min: 12
  max: 16
"""
P99_WARN_S, P99_CRITICAL_S = 0.4, 0.6
WINDOW_S = 4
STAGES = [{"nodes": 1}, {"percent": 100}]


def document(**sections) -> dict:
    return {"inference_params": {"max_tokens": {"whitelist": []}, **sections}}


def nodes_on(version) -> list[str]:
    return sorted(
        EngineNode.objects.filter(applied_hash=version.content_hash, is_connected=True).values_list("name", flat=True)
    )


def explain_rollout(rollout_pk: int, agents) -> str:
    """What a stuck rollout was doing: its state and evidence, every node's row, and the agents' log tails."""
    rollout = Rollout.objects.get(pk=rollout_pk)
    lines = [
        f"rollout {rollout.pk}: state={rollout.state} stage={rollout.stage_index} canary={rollout.canary_nodes} "
        f"acked_at={rollout.stage_acked_at} outcome={rollout.outcome!r}",
        f"evidence: {rollout.evidence}",
    ]
    for node in EngineNode.objects.order_by("name"):
        lines.append(
            f"{node.name}: connected={node.is_connected} applied={node.applied_hash[:12]} "
            f"nack={node.last_nack_hash[:12]} {node.last_nack_error[:200]!r}"
        )
    for agent in agents:
        lines.append(f"--- {agent.name} health: {agent.health()}\n{log_tail(agent)}")
    return "\n".join(lines)


def measured(agents) -> bool:
    """Every node's newest sample has a P99: traffic flows and each node's figures describe it."""
    newest = {
        name: values.get("latency_p99_s")
        for name, values in latest_values(scope=MetricSample.Scope.NODE, max_age_s=3).items()
    }
    return all(newest.get(agent.name) is not None for agent in agents)


def Analyser() -> Periodic:
    """The rollouts' analysis pass every half second in a thread, as `run_periodic` would every 2 s."""
    return Periodic(rollouts_analyse)


@pytest.fixture
def fleet(request, tmp_path, sre, short_sample_window):
    """daphne + pool `staging` (stages: 1 node, then 100 %; 4 s analysis windows over 2 s sample windows) on three
    agents, all on chat v1.

    Parametrized with 2 (`indirect`): two daphne processes, gpu-1 and gpu-3 connected to the first, gpu-2 to the
    second, so the canary and part of its baseline report to different processes."""
    processes = getattr(request, "param", 1)
    profile = tmp_path / "slow-fp8.yaml"
    profile.write_text(SLOW_FP8_PROFILE)
    with daphnes(tmp_path, processes) as servers:
        pool = pool_create(actor=sre, name="staging", is_production=False)
        pool = pool_canary_update(
            actor=sre, pool=pool, canary_stages=STAGES, analysis_window_s=WINDOW_S, reason="one canary node first"
        )
        template = template_create(actor=sre, name="chat")
        v1 = template_version_create(actor=sre, template=template, document=document(), base_number=None)
        # The pool's first version goes to every node at once: there is nothing to compare a canary with.
        pool_publish(actor=sre, pool=pool, version=v1, reason="first")
        agents = []
        for i in range(1, 4):
            node, token = node_create(actor=sre, name=f"gpu-{i}", pool=pool)
            url = servers[(i - 1) % processes].ws_agent_url
            agents.append(
                AgentProcess(name=node.name, token=token, control_plane_url=url, work=tmp_path, profile=profile)
            )
        try:
            start_agents(agents)
            wait_until(lambda: nodes_on(v1) == ["gpu-1", "gpu-2", "gpu-3"], 60, "three agents to connect and apply v1")
            yield {"pool": Pool.objects.get(pk=pool.pk), "template": template, "v1": v1, "agents": agents}
        finally:
            stop_agents(agents)


@pytest.mark.parametrize("fleet", [1, 2], indirect=True, ids=["one-process", "agents-split-over-two-processes"])
def test_slower_version_is_rolled_back_automatically_with_no_failed_request(fleet, sre):
    pool, template, v1, agents = fleet["pool"], fleet["template"], fleet["v1"], fleet["agents"]
    v2 = template_version_create(
        actor=sre, template=template, document=document(engine={"quantization": "fp8"}), base_number=1
    )
    seen_on_v2: set[str] = set()

    def rolled_back():
        seen_on_v2.update(nodes_on(v2))
        rollout = Rollout.objects.get(to_version=v2)
        return rollout.state == Rollout.State.ROLLED_BACK and nodes_on(v1) == ["gpu-1", "gpu-2", "gpu-3"]

    alert_rule_create(
        actor=sre, name="p99-latency", comment="this pool's SLO", metric="latency_p99_s", scope="node",
        comparison="gt", warn=P99_WARN_S, critical=P99_CRITICAL_S, for_s=10, runbook="p99-latency",
        summary="P99 end-to-end latency above the SLO line",
    )  # fmt: skip
    with Traffic(agents) as traffic, Analyser() as analyser:
        wait_until(lambda: measured(agents), 30, "every node's P99 on v1 (the baseline)")
        pool_publish(actor=sre, pool=pool, version=v2, reason="fp8 to fit more sequences")
        rollout = Rollout.objects.get(to_version=v2)
        assert rollout.canary_nodes == ["gpu-1"]
        wait_until(
            rolled_back,
            120,
            "the canary to fail its analysis and go back to v1",
            interval_s=0.2,
            explain=lambda: f"analyser errors: {analyser.errors}\n" + explain_rollout(rollout.pk, agents),
        )
        # Traffic keeps flowing on v1 after the rollback: every client's next requests are served too.
        served = traffic.outcomes[200]
        wait_until(lambda: traffic.outcomes[200] >= served + 4 * len(agents), 30, "requests after the rollback")
    assert analyser.errors == []
    assert traffic.outcomes[200] > 0, (traffic.outcomes, traffic.errors[:5])
    assert traffic.failed == 0, (traffic.outcomes, traffic.errors[:5])

    # Only the canary ever ran v2; it applied it (its P99 is v2's), then went back.
    assert seen_on_v2 == {"gpu-1"}
    canary = EngineNode.objects.get(name="gpu-1")
    assert canary.applied_hash == v1.content_hash
    assert agents[0].health()["applied"] == "chat v1"
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.ROLLED_BACK and rollout.stage_index == 0
    assert "canary analysis failed" in rollout.outcome and "P99" in rollout.outcome
    failed = rollout.evidence[-1]
    assert failed["verdict"] == "fail" and failed["canary_nodes"] == ["gpu-1"]
    assert failed["thresholds"]["p99_critical_s"] == P99_CRITICAL_S and "slow_nodes" not in failed
    assert failed["canary"]["latency_p99_s"] > failed["thresholds"]["p99_critical_s"]
    assert failed["canary"]["latency_p99_s"] > failed["baseline"]["latency_p99_s"] * failed["thresholds"]["p99_ratio"]
    pool.refresh_from_db()
    assert pool.desired_version_id == v1.pk

    entry = AuditEntry.objects.get(action="pool.rollback")
    assert entry.actor_name == "system"
    assert "canary analysis failed" in entry.reason
    assert entry.after["rollout"] == rollout.pk and entry.after["evidence"]["verdict"] == "fail"


def test_harmless_version_is_promoted_through_both_stages_to_every_node(fleet, sre):
    pool, template, agents = fleet["pool"], fleet["template"], fleet["agents"]
    v2 = template_version_create(
        actor=sre, template=template, document=document(engine={"max_num_seqs": 32}), base_number=1
    )
    with Traffic(agents) as traffic, Analyser() as analyser:
        wait_until(lambda: measured(agents), 30, "every node's P99 on v1 (the baseline)")
        pool_publish(actor=sre, pool=pool, version=v2, reason="more sequences per batch")
        rollout = Rollout.objects.get(to_version=v2)
        assert rollout.canary_nodes == ["gpu-1"]
        wait_until(
            lambda: Rollout.objects.get(pk=rollout.pk).state != Rollout.State.RUNNING,
            120,
            "the rollout to end",
            explain=lambda: f"analyser errors: {analyser.errors}\n" + explain_rollout(rollout.pk, agents),
        )
    assert analyser.errors == []
    assert traffic.outcomes[200] > 0, (traffic.outcomes, traffic.errors[:5])
    assert traffic.failed == 0, (traffic.outcomes, traffic.errors[:5])
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.SUCCEEDED, (rollout.outcome, rollout.evidence)
    assert rollout.stage_nodes == [["gpu-1"], ["gpu-2", "gpu-3"]]
    assert rollout.stage_index == 1
    passed = rollout.evidence[0]
    assert passed["verdict"] == "pass" and passed["stage"] == 0
    assert passed["canary"]["latency_p99_s"] is not None and passed["baseline"]["latency_p99_s"] is not None
    assert nodes_on(v2) == ["gpu-1", "gpu-2", "gpu-3"]
    assert {agent.health()["applied"] for agent in agents} == {"chat v2"}
    assert not AuditEntry.objects.filter(action="pool.rollback").exists()
