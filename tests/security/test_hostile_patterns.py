"""Strict patterns a template author writes cannot stall a node or the dashboard: what RE2 cannot run is refused at
save (REST API, the field named) and NACKed by the agent when pushed anyway; the dashboard's "Try a message"
(the explain API) answers a hostile message as promptly as a normal one."""

import json
import random
import statistics
import time

import pytest
from django.urls import reverse

from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.models import ParameterTemplate, TemplateVersion
from controlplane.params.schema import DEFAULT_STRICT_PATTERNS
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, wait_until
from tests.helpers import error_paths, state_snapshot
from tests.live_server import Daphne

VERSIONS = "/api/v1/templates/chat/versions/"
REFUSED = {
    "backreference": (r"(\d{4})-\1", "which has no backreferences"),
    "named backreference": (r"(?P<year>\d{4})(?P=year)", "which has no backreferences"),
    "look-behind": (r"(?<!\d)1[3-9]\d{9}", "which has no look-around"),
    "look-ahead": (r"\d{11}(?!\d)", "which has no look-around"),
}
ADDED_LIMIT_MS = 50


def document(*patterns: str) -> dict:
    return {"inference_params": {"max_tokens": {"whitelist": []}, "temperature": {"strict_patterns": list(patterns)}}}


@pytest.mark.django_db
@pytest.mark.parametrize(("pattern", "reason"), REFUSED.values(), ids=REFUSED.keys())
def test_a_pattern_re2_cannot_run_is_refused_at_save_naming_it(api_for, sre, pattern, reason):
    template_create(actor=sre, name="chat")
    before = state_snapshot()
    response = api_for("agent").post(
        VERSIONS, {"base_version": None, "document": document(r"\d+元", pattern)}, format="json"
    )
    assert response.status_code == 400, response.content[:500]
    body = response.json()
    assert "temperature.strict_patterns[1]" in error_paths(body), body
    assert "temperature.strict_patterns[1]: is not a valid regular expression" in body["error"], body
    assert reason in body["error"], body
    assert state_snapshot() == before


@pytest.mark.django_db
def test_a_pattern_only_a_backtracking_engine_chokes_on_is_saved(api_for, sre):
    # (a|a)+$ froze a gateway on Python's re; on RE2 it is linear, so it is a pattern like any other
    # (test_hostile_messages.py runs it on a node under hostile load).
    template_create(actor=sre, name="chat")
    response = api_for("agent").post(
        VERSIONS, {"base_version": None, "document": document(r"(a|a)+$", r"(x+x+)+y")}, format="json"
    )
    assert response.status_code == 201, response.content[:500]


@pytest.mark.django_db(transaction=True)
@pytest.mark.agents
def test_a_config_pushed_past_validation_is_nacked_naming_the_pattern(tmp_path, sre):
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    server = Daphne(tmp_path)
    server.start()
    pool = pool_create(actor=sre, name="staging", is_production=False)
    Pool.objects.filter(pk=pool.pk).update(canary_stages=[{"percent": 100}])
    template = template_create(actor=sre, name="chat")
    v1 = template_version_create(actor=sre, template=template, document=document(r"\d+元"), base_number=None)
    node, token = node_create(actor=sre, name="gpu-1", pool=pool)
    agent = AgentProcess(
        name="gpu-1", token=token, control_plane_url=server.ws_agent_url, work=tmp_path, profile=profile
    )
    try:
        agent.start()
        wait_until(lambda: EngineNode.objects.filter(is_connected=True).exists(), 30, "the agent to connect")
        pool_publish(actor=sre, pool=pool, version=v1, reason="first")
        wait_until(lambda: EngineNode.objects.get(pk=node.pk).applied_hash == v1.content_hash, 30, "the ACK of v1")
        # Written straight to the table, as a buggy or compromised control plane could push it.
        params = document(r"\d+元", r"(\d{4})-\1")["inference_params"]
        v2 = TemplateVersion.objects.create(template=template, number=2, base_number=1, author=sre, params=params)
        ParameterTemplate.objects.filter(pk=template.pk).update(latest_number=2)
        pool_publish(actor=sre, pool=Pool.objects.get(pk=pool.pk), version=v2, reason="pushed past validation")
        wait_until(lambda: EngineNode.objects.get(pk=node.pk).last_nack_hash == v2.content_hash, 30, "the NACK of v2")
        refused = EngineNode.objects.get(pk=node.pk)
        assert refused.last_nack_error.startswith(
            "temperature.strict_patterns[1]: is not a valid regular expression"
        ), refused.last_nack_error
        assert "backreferences" in refused.last_nack_error
        assert refused.applied_hash == v1.content_hash
        status, reply = agent.chat()
        assert status == 200 and reply["choices"][0]["message"]["content"]
        assert agent.health()["applied"] == "chat v1"
    finally:
        agent.stop()
        server.stop()


def _explain_ms(client, url: str, message: str) -> tuple[int, float]:
    # ensure_ascii: a lone surrogate can only travel as a \ud800 escape.
    body = json.dumps({"message": message})
    started = time.perf_counter()
    response = client.post(url, body, content_type="application/json")
    return response.status_code, (time.perf_counter() - started) * 1000


@pytest.mark.django_db
def test_the_dashboard_explain_answers_a_hostile_message_as_promptly_as_a_normal_one(api_for, sre):
    template = template_create(actor=sre, name="chat")
    version = template_version_create(
        actor=sre,
        template=template,
        document=document(*DEFAULT_STRICT_PATTERNS, r"(a|a)+$", r"(\d+)*元$"),
        base_number=None,
    )
    url = reverse("api:template-version-explain", args=["chat", version.number])
    client = api_for("agent")
    rng = random.Random(2)
    hostile = {
        "1" * 20000: 200,  # the explain limit
        "a" * 28 + "!": 200,
        "1" * 28 + "!": 200,
        "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(20000)): 200,
        "😀" * 20000: 200,
        "a" + "\u0301" * 19999: 200,
        "\ud800" * 20000: 400,  # DRF refuses surrogates in a CharField, naming `message`
    }
    normal = []
    for _ in range(3):
        for message in ("我的订单到哪了？", "有什么适合送女朋友的生日礼物推荐吗"):
            status, elapsed = _explain_ms(client, url, message)
            assert status == 200
            normal.append(elapsed)
    baseline = statistics.median(normal)
    for message, expected in hostile.items():
        timings = []
        for _ in range(2):  # the better of two: one preemption on a shared machine is not the product
            status, elapsed = _explain_ms(client, url, message)
            assert status == expected, ascii(message[:12])
            timings.append(elapsed)
        assert min(timings) < baseline + ADDED_LIMIT_MS, (ascii(message[:12]), timings, baseline)


@pytest.mark.django_db
def test_explaining_a_version_saved_before_re2_names_the_refused_pattern(api_for, sre):
    template = template_create(actor=sre, name="chat")
    old = TemplateVersion.objects.create(
        template=template, number=1, author=sre, params=document(r"(?<!\d)1[3-9]\d{9}(?!\d)")["inference_params"]
    )
    response = api_for("agent").post(
        reverse("api:template-version-explain", args=["chat", old.number]), {"message": "13812345678"}, format="json"
    )
    assert response.status_code == 400
    body = response.json()
    assert "temperature.strict_patterns[0]" in error_paths(body), body
    assert "nodes refuse this version" in body["error"]
