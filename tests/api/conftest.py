"""A small world for API tests: a whitelist, a template with two versions, and two pools."""

import pytest

from controlplane.nodes.services import pool_publish
from tests.factories import legal_whitelist, pools, template_with_versions


@pytest.fixture
def world(users):
    """`legal` whitelist, template `chat` v1-v2, pools `staging` (ran v1 then v2) and `prod-main` (empty)."""
    agent, sre = users["agent"], users["sre"]
    legal = legal_whitelist(agent)
    template, (v1, v2) = template_with_versions(agent, "chat", temperatures=(0.3, 0.2))
    staging, prod = pools(sre)
    pool_publish(actor=sre, pool=staging, version=v1, reason="first rollout")
    pool_publish(actor=sre, pool=staging, version=v2, reason="cooler strict tier")
    return {"legal": legal, "template": template, "v1": v1, "v2": v2, "staging": staging, "prod": prod}
