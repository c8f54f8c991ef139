"""Why a node is not on its pool's desired version: one reason per node, in the fleet API and pages."""

import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.selectors import node_summary
from controlplane.nodes.services import agent_sessions
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_publish, pool_rollback
from tests.factories import pools, template_with_versions

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(sre):
    """staging on chat v1 with gpu-1 and gpu-2 connected, online and on v1; canary stages 1 node, then all."""
    staging, _ = pools(sre)
    Pool.objects.filter(pk=staging.pk).update(canary_stages=[{"nodes": 1}, {"percent": 100}])
    _, versions = template_with_versions(sre, temperatures=(0.3, 0.2, 0.1))
    pool_publish(actor=sre, pool=staging, version=versions[0], reason="first")
    nodes = []
    for name in ("gpu-1", "gpu-2"):
        node, _ = node_create(actor=sre, name=name, pool=staging)
        agent_sessions.node_hello(node_id=node.pk, session_id=name, hello={"status": "online"})
        ack(node, versions[0])
        nodes.append(node)
    return {"staging": staging, "versions": versions, "nodes": nodes}


def ack(node, version) -> None:
    agent_sessions.nodes_config_acked(node_ids=[node.pk], content_hash=version.content_hash, version_id=version.pk)


def reason(name: str) -> tuple[str, str]:
    node = EngineNode.objects.select_related("pool__desired_version__template", "applied_version__template").get(
        name=name
    )
    summary = node_summary(node=node, now=timezone.now())
    return summary["sync_code"], summary["sync_reason"]


def staging(world) -> Pool:
    return Pool.objects.get(pk=world["staging"].pk)


def test_a_node_on_the_desired_version_has_nothing_to_explain(world):
    assert reason("gpu-1") == ("", "")


def test_a_publish_waits_for_each_nodes_ack_and_a_canary_says_who_is_not_in_the_stage(sre, world):
    v2 = world["versions"][1]
    pool_publish(actor=sre, pool=staging(world), version=v2, reason="cooler")
    code, text = reason("gpu-1")
    assert code == "waiting_for_ack"
    assert re.fullmatch(r"waiting for its ACK of chat v2 \(sent \d\d:\d\d:\d\d UTC\)", text), text
    assert reason("gpu-2") == (
        "canary",
        "canary: not in this stage (stage 1 of 2 runs chat v2 on 1 node(s)); it keeps chat v1 until a stage reaches it",
    )


def test_a_nack_a_warmup_and_an_engine_restart_are_named(sre, world):
    v2 = world["versions"][1]
    Pool.objects.filter(pk=world["staging"].pk).update(canary_stages=[{"percent": 100}])
    pool_publish(actor=sre, pool=staging(world), version=v2, reason="cooler")
    gpu1, gpu2 = world["nodes"]
    agent_sessions.node_warmup_progress(node_id=gpu1.pk, progress={"state": "running", "done": 12, "total": 100})
    agent_sessions.node_heartbeat(node_id=gpu1.pk, heartbeat={"status": "warming"})
    assert reason("gpu-1") == ("warming", "warming up (12/100 requests): it ACKs chat v2 once the warmup check passes")
    agent_sessions.node_heartbeat(node_id=gpu2.pk, heartbeat={"status": "restarting"})
    assert reason("gpu-2") == ("applying", "applying chat v2: restarting the engine for a cold change")
    agent_sessions.node_config_result(
        node_id=gpu1.pk,
        ok=False,
        content_hash=v2.content_hash,
        version={"template": "chat", "number": 2},
        error="warmup failed: p99 3.04 s > 2 s over the first 100 requests",
    )
    assert reason("gpu-1") == ("nacked", "NACKed chat v2: warmup failed: p99 3.04 s > 2 s over the first 100 requests")
    agent_sessions.node_heartbeat(node_id=gpu2.pk, heartbeat={"status": "degraded"})
    assert reason("gpu-2") == (
        "degraded",
        "its engine is degraded (crashed or failed to start); chat v2 is applied once it serves",
    )


def test_after_a_rollback_a_node_still_on_the_newer_version_is_rolling_back(sre, world):
    v2 = world["versions"][1]
    Pool.objects.filter(pk=world["staging"].pk).update(canary_stages=[{"percent": 100}])
    pool_publish(actor=sre, pool=staging(world), version=v2, reason="cooler")
    for node in world["nodes"]:
        ack(node, v2)
    pool_rollback(actor=sre, pool=staging(world), reason="answers too terse")
    ack(world["nodes"][0], world["versions"][0])
    assert reason("gpu-1") == ("", "")
    code, text = reason("gpu-2")
    assert code == "rolling_back"
    assert re.fullmatch(r"rolling back to chat v1: waiting for its ACK \(sent \d\d:\d\d:\d\d UTC\)", text), text


def test_offline_and_never_connected_nodes(sre, world):
    v2 = world["versions"][1]
    Pool.objects.filter(pk=world["staging"].pk).update(canary_stages=[{"percent": 100}])
    pool_publish(actor=sre, pool=staging(world), version=v2, reason="cooler")
    EngineNode.objects.filter(name="gpu-1").update(is_connected=False)
    code, text = reason("gpu-1")
    assert code == "offline"
    assert re.fullmatch(r"offline since \d\d:\d\d:\d\d UTC: it is sent chat v2 when it reconnects", text), text
    node_create(actor=sre, name="gpu-new", pool=staging(world))
    assert reason("gpu-new") == ("never_connected", "not connected yet: its agent gets chat v2 when it first connects")


def test_the_fleet_api_and_page_show_the_reason(sre, world, api_for):
    v2 = world["versions"][1]
    Pool.objects.filter(pk=world["staging"].pk).update(canary_stages=[{"percent": 100}])
    pool_publish(actor=sre, pool=staging(world), version=v2, reason="cooler")
    ack(world["nodes"][0], v2)
    agent_sessions.node_config_result(
        node_id=world["nodes"][1].pk,
        ok=False,
        content_hash=v2.content_hash,
        version={"template": "chat", "number": 2},
        error="max_model_len 65536 exceeds the model's 40960 positions",
    )
    nodes = {n["name"]: n for n in api_for("oncall").get("/api/v1/nodes/").json()["results"]}
    assert (nodes["gpu-1"]["sync_code"], nodes["gpu-1"]["sync_reason"]) == ("", "")
    assert nodes["gpu-2"]["sync_code"] == "nacked"
    assert nodes["gpu-2"]["sync_reason"] == "NACKed chat v2: max_model_len 65536 exceeds the model's 40960 positions"
    client = Client()
    client.force_login(sre)
    page = client.get(reverse("dashboard:fleet")).content.decode()
    assert "NACKed chat v2: max_model_len 65536 exceeds the model&#x27;s 40960 positions" in page
    node_page = client.get(reverse("dashboard:node-detail", kwargs={"name": "gpu-2"})).content.decode()
    assert "NACKed chat v2: max_model_len 65536" in node_page
    pool_page = client.get(reverse("dashboard:pool-detail", kwargs={"name": "staging"})).content.decode()
    assert "NACKed chat v2: max_model_len 65536" in pool_page
