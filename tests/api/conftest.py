"""A small world for API tests: a whitelist, a template with two versions, and two pools."""

import pytest
from django.utils import timezone

from controlplane.nodes.models import EngineNode
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_publish
from controlplane.operations.services import override_set
from tests.factories import legal_whitelist, pools, template_with_versions


@pytest.fixture
def world(users):
    return build_world(users)


def build_world(users) -> dict:
    """`legal` whitelist, template `chat` v1-v2, pools `staging` (ran v1 then v2) and `prod-main` (empty),
    node `gpu-1` in staging, connected, and an override of conversation `conv-1` in staging."""
    agent, sre = users["agent"], users["sre"]
    legal = legal_whitelist(agent)
    template, (v1, v2) = template_with_versions(agent, "chat", temperatures=(0.3, 0.2))
    staging, prod = pools(sre)
    pool_publish(actor=sre, pool=staging, version=v1, reason="first rollout")
    pool_publish(actor=sre, pool=staging, version=v2, reason="cooler strict tier")
    node, _ = node_create(actor=sre, name="gpu-1", pool=staging)
    EngineNode.objects.filter(pk=node.pk).update(is_connected=True, last_seen_at=timezone.now())
    override_set(actor=agent, pool=staging, conversation="conv-1", tier="strict", reason="refund dispute")
    return {"node": node, "legal": legal, "template": template, "v1": v1, "v2": v2, "staging": staging, "prod": prod}
