"""A staging pool with one registered node, the report's template as version 1, and a stored log."""

import pytest

from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_publish
from tests.factories import legal_whitelist, pools, template_with_versions
from tests.replays.logs import log_lines, store_log


@pytest.fixture
def tuning_world(sre, settings, tmp_path):
    settings.CONVERSATION_LOG_DIR = tmp_path / "logs"
    legal_whitelist(sre)
    staging, production = pools(sre)
    node_create(actor=sre, name="sim-1", pool=staging)
    node_create(actor=sre, name="prod-1", pool=production)
    template, (v1, v2) = template_with_versions(sre, temperatures=(0.3, 0.2))
    pool_publish(actor=sre, pool=staging, version=v1, reason="staging runs v1")
    log = store_log(sre, log_lines(20))
    return {"staging": staging, "production": production, "template": template, "v1": v1, "v2": v2, "log": log}


def study_args(world, **changes) -> dict:
    args = {
        "pool": world["staging"],
        "base_version": world["v2"],
        "log": world["log"],
        "space": [{"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 32, "step": 8}],
        "objective": "min_p99",
        "replay": {"qps": 20, "duration_s": 5},
        "budget": 3,
        "reason": "find max_num_seqs for the festival",
    }
    args.update(changes)
    return args
