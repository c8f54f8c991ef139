"""The policy bundle and intent models reach live agents: the control plane (daphne, Redis layer, Postgres) and an
agent on the simulator. An override set in the control plane changes the next request's tier; revoking it, or a
whitelist edit, changes it back; a published intent model replaces the built-in one, hash-checked."""

import json
import urllib.request

import pytest

from controlplane.nodes.models import EngineNode
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.operations.services import override_revoke, override_set
from controlplane.params.services.templates import template_create, template_version_create
from controlplane.params.services.whitelists import whitelist_create, whitelist_version_create
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, wait_until
from tests.live_server import Daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]


def explain(agent: AgentProcess, **body) -> dict:
    request = urllib.request.Request(
        f"{agent.url}/v1/policy/explain", data=json.dumps(body).encode(), headers=agent.headers
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def node(tmp_path, sre):
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    server = Daphne(tmp_path)
    server.start()
    pool = pool_create(actor=sre, name="staging", is_production=False)
    engine_node, token = node_create(actor=sre, name="gpu-1", pool=pool)
    agent = AgentProcess(
        name=engine_node.name, token=token, control_plane_url=server.ws_agent_url, work=tmp_path, profile=profile
    )
    try:
        agent.start()
        wait_until(lambda: EngineNode.objects.filter(is_connected=True).count() == 1, 30, "the agent to connect")
        yield {"pool": pool, "agent": agent}
    finally:
        agent.stop()
        server.stop()


def test_overrides_and_whitelists_reach_the_gateway(node, sre, agent):
    pool, gateway = node["pool"], node["agent"]
    legal_list = whitelist_create(actor=sre, name="legal", scenarios=["legal_policy"])
    template = template_create(actor=sre, name="chat")
    version = template_version_create(actor=sre, template=template, document={"inference_params": {}}, base_number=None)
    pool_publish(actor=sre, pool=pool, version=version, reason="first")
    wait_until(lambda: explain(gateway, message="hi")["template"] == "chat v1", 15, "the config")
    payment = {"message": "我付了¥299.00怎么还显示未支付", "conversation_id": "c-9"}
    assert explain(gateway, **payment)["decision"]["tier_rule"] == "regex"

    override = override_set(actor=agent, pool=pool, conversation="c-9", tier="creative", reason="VIP, handled by hand")
    decision = wait_until(
        lambda: (d := explain(gateway, **payment)["decision"])["tier_rule"] == "override" and d, 5, "the override"
    )
    assert (decision["tier"], decision["override"]["set_by"]) == ("creative", agent.username)

    override_revoke(actor=agent, override=override, reason="resolved")
    wait_until(lambda: explain(gateway, **payment)["decision"]["tier_rule"] == "regex", 5, "the revocation")

    legal = {"message": "第十二条怎么解释", "business_tag": "contract", "max_tokens": 1500}
    assert explain(gateway, **legal)["decision"]["max_tokens"] == 256
    whitelist_version_create(actor=sre, whitelist=legal_list, scenarios=["legal_policy", "contract"], base_number=1)
    wait_until(lambda: explain(gateway, **legal)["decision"]["max_tokens"] == 1500, 5, "the whitelist edit")


def test_a_published_intent_model_replaces_the_built_in_one_and_unpublishing_restores_it(node, sre):
    from controlplane.datasets.services.releases import intent_model_publish, intent_model_unpublish
    from controlplane.nodes.services.agent_policy import builtin_intent_model_sha256
    from tests.datasets.factories import easy_dataset, train_now

    pool, gateway = node["pool"], node["agent"]
    assert explain(gateway, message="hi")["intent_model"] == builtin_intent_model_sha256()
    model = train_now(sre, easy_dataset(sre))
    assert model.status == "succeeded" and model.accuracy >= 0.92
    intent_model_publish(actor=sre, pool=pool, intent_model=model, reason="trained on the easy set")
    wait_until(lambda: explain(gateway, message="hi")["intent_model"] == model.sha256, 10, "the model to arrive")
    # The node keeps it on disk: a restarted agent classifies with it before it reconnects.
    gateway.stop()
    gateway.start()
    assert explain(gateway, message="hi")["intent_model"] == model.sha256
    intent_model_unpublish(actor=sre, pool=pool, reason="back to the built-in model")
    wait_until(
        lambda: explain(gateway, message="hi")["intent_model"] == builtin_intent_model_sha256(), 10, "the built-in"
    )
