"""The production gate with a real agent on the simulator against the real control plane (daphne, Redis, Postgres).

Staging's node ACKs a version and runs it; production refuses the version until the node has run it healthy for
staging's (short) soak window, then takes it. A version the staging node NACKs is refused for production with the
node's own error; an SRE's override still publishes it. The gate's watch runs in this process, as the periodic task
would every 5 s.
"""

import time

import pytest
from django.utils import timezone

from controlplane.audit.models import AuditEntry
from controlplane.nodes.exceptions import ProductionGateClosed
from controlplane.nodes.models import EngineNode, Pool, VersionRun
from controlplane.nodes.selectors import node_summary
from controlplane.nodes.services.canary_settings import pool_canary_update
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.nodes.services.version_runs import version_runs_watch
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, start_agents, wait_until
from tests.live_server import Daphne
from tests.periodic import Periodic

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

# Seconds a staging node must run a version healthy (300 by default). The run opens once the node reports online (a
# heartbeat after its ACK, every 2 s) and counts from the ACK: the early publish comes well inside the window.
SOAK_S = 8


def document(**sections) -> dict:
    return {"inference_params": {"max_tokens": {"whitelist": []}, **sections}}


def Watch() -> Periodic:
    """The gate's watch every half second in a thread (the beat schedule runs it every 5 s)."""
    return Periodic(version_runs_watch)


@pytest.fixture
def gate(tmp_path, sre):
    """daphne; pools staging (soak 8 s) and prod-main; gpu-1 of staging running an agent on the simulator."""
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    server = Daphne(tmp_path)
    server.start()
    staging = pool_create(actor=sre, name="staging", is_production=False)
    staging = pool_canary_update(
        actor=sre,
        pool=staging,
        canary_stages=[{"percent": 100}],
        analysis_window_s=60,
        soak_s=SOAK_S,
        reason="a short soak for the test",
    )
    prod = pool_create(actor=sre, name="prod-main", is_production=True)
    template = template_create(actor=sre, name="chat")
    node, token = node_create(actor=sre, name="gpu-1", pool=staging)
    agent = AgentProcess(
        name=node.name, token=token, control_plane_url=server.ws_agent_url, work=tmp_path, profile=profile
    )
    try:
        start_agents([agent])
        wait_until(lambda: EngineNode.objects.filter(is_connected=True).count() == 1, 30, "the agent to connect")
        yield {"staging": staging, "prod": prod, "template": template, "agent": agent}
    finally:
        agent.stop()
        server.stop()


def applied(version) -> bool:
    return EngineNode.objects.filter(name="gpu-1", applied_hash=version.content_hash).exists()


def test_production_takes_a_version_only_after_staging_ran_it_healthy_and_refuses_a_nacked_one(gate, sre):
    staging, prod, template, agent = gate["staging"], gate["prod"], gate["template"], gate["agent"]
    v1 = template_version_create(actor=sre, template=template, document=document(), base_number=None)
    # The engine accepts any max_model_len up to the model's 40960 positions; 65536 must fail at start-up.
    v2 = template_version_create(
        actor=sre, template=template, document=document(engine={"max_model_len": 65536}), base_number=1
    )
    with Watch() as watch:
        pool_publish(actor=sre, pool=staging, version=v1, reason="stage it")
        wait_until(lambda: applied(v1), 60, "gpu-1 to ACK v1")
        wait_until(lambda: VersionRun.objects.filter(version=v1, state="soaking").exists(), 30, "v1's run to open")
        with pytest.raises(ProductionGateClosed) as early:
            pool_publish(actor=sre, pool=prod, version=v1, reason="too early")
        assert "on staging: gpu-1 for " in early.value.message and f" of {SOAK_S} s" in early.value.message
        assert "it counts once it has run healthy for the whole window, in " in early.value.message

        wait_until(
            lambda: VersionRun.objects.filter(version=v1, state="passed").exists(), 60, "v1's run on gpu-1 to pass"
        )
        run = VersionRun.objects.get(version=v1, state="passed")
        assert run.started_at == EngineNode.objects.get(name="gpu-1").applied_at
        assert (run.passed_at - run.started_at).total_seconds() == SOAK_S
        release = pool_publish(actor=sre, pool=Pool.objects.get(pk=prod.pk), version=v1, reason="ran on staging")
        assert release.override_reason == ""

        pool_publish(actor=sre, pool=Pool.objects.get(pk=staging.pk), version=v2, reason="longer context")
        wait_until(
            lambda: EngineNode.objects.filter(name="gpu-1", last_nack_hash=v2.content_hash).exists(),
            60,
            "gpu-1 to NACK v2",
        )
        error = EngineNode.objects.get(name="gpu-1").last_nack_error
        assert "max_model_len" in error
        with pytest.raises(ProductionGateClosed) as refused:
            pool_publish(actor=sre, pool=Pool.objects.get(pk=prod.pk), version=v2, reason="longer context")
        assert f"NACKed on staging by gpu-1: {error}" in refused.value.message
        node = EngineNode.objects.select_related("pool__desired_version__template").get(name="gpu-1")
        summary = node_summary(node=node, now=timezone.now())
        assert (summary["sync_code"], summary["sync_reason"]) == ("nacked", f"NACKed chat v2: {error}")

        # The node kept serving v1 all along; an SRE may still send v2 to production, on the record.
        assert agent.chat()[0] == 200 and agent.health()["applied"] == "chat v1"
        pool_publish(
            actor=sre,
            pool=Pool.objects.get(pk=prod.pk),
            version=v2,
            reason="longer context",
            override_reason="prod hosts have the long-context model",
        )
        time.sleep(1)
    assert watch.errors == []
    entry = AuditEntry.objects.filter(action="pool.publish").order_by("-id").first()
    assert entry.after["override_reason"] == "prod hosts have the long-context model"
    assert entry.after["production_gate"] == f"NACKed on staging by gpu-1: {error}"
