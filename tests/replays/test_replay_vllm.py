"""A short replay through a real vLLM (CPU build, tiny generated model) behind a real agent (the session's,
tests/engine_node/vllm_node.py): the rows carry real token counts from vLLM's usage, the gateway's first-turn cap and
its continuation rounds."""

import pytest

from controlplane.nodes.models import EngineNode
from controlplane.nodes.services.pools import pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from controlplane.replays.models import ReplayRequest, ReplayRun
from controlplane.replays.services import replay_run_create
from tests.engine_node.conftest import SERVED_MODEL_NAME
from tests.engine_node.fleet import wait_until
from tests.replays.logs import log_lines, store_log

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vllm, pytest.mark.agents]

DOCUMENT = {
    "inference_params": {
        "max_tokens": {"whitelist": [], "default": 16, "streaming_threshold": 16},
        "degradation": {"max_tokens": 16},
        "batch": {"long_context_threshold": 512},
        "engine": {"max_model_len": 1024, "max_num_seqs": 4, "served_model_name": SERVED_MODEL_NAME},
    }
}


def test_a_replay_through_real_vllm_records_its_usage(vllm_node, tmp_path, sre, agent, settings):
    settings.CONVERSATION_LOG_DIR = tmp_path / "logs"
    pool, node = vllm_node.pool, vllm_node.node
    version = template_version_create(
        actor=sre, template=template_create(actor=sre, name="tiny"), document=DOCUMENT, base_number=None
    )
    vllm_node.connect()
    pool_publish(actor=sre, pool=pool, version=version, reason="tiny model")
    wait_until(
        lambda: (
            (n := EngineNode.objects.get(pk=node.pk)).applied_hash == version.content_hash
            and n.reported_status == "online"
            and n.gateway_url
        ),
        240,
        "the node to serve the version",
    )
    log = store_log(agent, log_lines(6))
    run = replay_run_create(
        actor=agent, pool=pool, log=log, reason="real engine", qps=2, arrival="uniform", duration_cap_s=30
    )
    run = wait_until(
        lambda: (r := ReplayRun.objects.get(pk=run.pk)).status in ReplayRun.FINISHED and r, 120, "the run to end"
    )
    assert run.status == "succeeded", run.error
    rows = list(ReplayRequest.objects.filter(run=run))
    assert len(rows) == 6 and all(r.ok and r.node_name == "cpu-1" for r in rows), [r.error for r in rows]
    for row in rows:
        assert row.max_tokens == 16 and row.prompt_tokens > 0 and row.reply_tokens > 0
        assert row.ttft_s is not None and row.e2e_s >= row.ttft_s
        assert row.continuation_rounds is not None
        # The first round ends with its last chunk: before the end when the gateway continued the reply.
        assert row.ttft_s <= row.first_round_s <= row.e2e_s
        assert (row.first_round_s < row.e2e_s) == (row.continuation_rounds > 0), row
    assert run.pool_metrics["simulated_nodes"] == 0
