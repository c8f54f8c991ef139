"""Tuning staff (role `agent`) edit whitelists; production gateways change only when an SRE publishes.

Against the real pieces: daphne with the Redis layer and Postgres, and two agent processes on the simulator, one in
`staging` (which follows whitelist edits at once: the positive control that the push path is fast) and one in
`prod-main`. The agent's edit reaches staging within seconds and leaves production's bundle file and the max_tokens
its gateway gives a whitelisted request untouched; the SRE's republish then brings it.
"""

import json
import time
import urllib.request

import pytest

from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from controlplane.params.services.whitelists import whitelist_create, whitelist_version_create
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, wait_until
from tests.live_server import Daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

# A contract question tagged `contract`, asking for more than the first-turn cap (256).
CONTRACT_REQUEST = {"message": "第十二条怎么解释", "business_tag": "contract", "max_tokens": 1500}


def gateway_max_tokens(agent: AgentProcess) -> int:
    """The max_tokens the gateway applied to a real chat request (its `X-Policy-Max-Tokens` header)."""
    body = {
        "model": agent.model,
        "messages": [{"role": "user", "content": CONTRACT_REQUEST["message"]}],
        "max_tokens": CONTRACT_REQUEST["max_tokens"],
        "business_tag": CONTRACT_REQUEST["business_tag"],
    }
    request = urllib.request.Request(
        f"{agent.url}/v1/chat/completions", data=json.dumps(body).encode(), headers=agent.headers
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.headers["X-Policy-Max-Tokens"])


def explained_max_tokens(agent: AgentProcess) -> int:
    request = urllib.request.Request(
        f"{agent.url}/v1/policy/explain",
        data=json.dumps(CONTRACT_REQUEST).encode(),
        headers=agent.headers,
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["decision"]["max_tokens"]


@pytest.fixture
def fleet(tmp_path, sre, agent):
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    server = Daphne(tmp_path)
    server.start()
    legal = whitelist_create(actor=agent, name="legal", scenarios=["legal_policy"])
    template = template_create(actor=agent, name="chat")
    version = template_version_create(
        actor=agent, template=template, document={"inference_params": {}}, base_number=None
    )
    staging = pool_create(actor=sre, name="staging", is_production=False)
    # A short soak, so the version has run on staging by the time the SRE republishes to production below.
    Pool.objects.filter(pk=staging.pk).update(soak_s=1)
    prod = pool_create(actor=sre, name="prod-main", is_production=True)
    pool_publish(actor=sre, pool=staging, version=version, reason="first")
    # No node has run it yet: the production gate is skipped on the record (what this test holds is the whitelist).
    pool_publish(actor=sre, pool=prod, version=version, reason="after staging", override_reason="fixture")
    agents = {}
    try:
        for pool in (staging, prod):
            node, token = node_create(actor=sre, name=f"{pool.name}-1", pool=pool)
            agents[pool.name] = AgentProcess(
                name=node.name, token=token, control_plane_url=server.ws_agent_url, work=tmp_path, profile=profile
            )
            agents[pool.name].start()
        wait_until(lambda: EngineNode.objects.filter(is_connected=True).count() == 2, 30, "both agents to connect")
        for gateway in agents.values():
            wait_until(lambda g=gateway: (g.state_dir / "policy_bundle.json").exists(), 20, "the first bundle")
            wait_until(lambda g=gateway: explained_max_tokens(g) == 256, 20, "the first config")
        yield {"legal": legal, "version": version, "prod": prod, "agents": agents}
    finally:
        for gateway in agents.values():
            gateway.stop()
        server.stop()


def test_an_agents_whitelist_edit_reaches_production_only_through_an_sre_publish(fleet, agent, sre):
    staging, prod = fleet["agents"]["staging"], fleet["agents"]["prod-main"]
    bundle_file = prod.state_dir / "policy_bundle.json"
    prod_bundle = bundle_file.read_text(encoding="utf-8")
    assert gateway_max_tokens(prod) == 256

    whitelist_version_create(
        actor=agent, whitelist=fleet["legal"], scenarios=["legal_policy", "contract"], base_number=1
    )
    # The push path is fast: staging has it within seconds...
    wait_until(lambda: explained_max_tokens(staging) == 1500, 10, "staging to follow the whitelist edit")
    assert gateway_max_tokens(staging) == 1500
    # ...and production, given the same time and more, has nothing.
    time.sleep(2)
    assert bundle_file.read_text(encoding="utf-8") == prod_bundle
    assert (gateway_max_tokens(prod), explained_max_tokens(prod)) == (256, 256)

    pool_publish(actor=sre, pool=fleet["prod"], version=fleet["version"], reason="legal covers contracts now")
    wait_until(lambda: explained_max_tokens(prod) == 1500, 10, "production to get the republished whitelists")
    assert gateway_max_tokens(prod) == 1500
    assert json.loads(bundle_file.read_text(encoding="utf-8"))["content"]["whitelists"] == {
        "legal": ["legal_policy", "contract"]
    }
