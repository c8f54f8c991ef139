"""A warmup run on the real vLLM CPU build, end to end through the control plane, with one vLLM start.

The node's disk already holds the pool's published config (as after an earlier apply), so the agent starts vLLM
once on it. With nothing on disk for the warmup, it waits for the control plane's answer to its hello, which
brings the pool's 20-message dataset, replays it against vLLM with the gate shut (real latencies), passes the
check over the first 20 requests and only then opens the gate: a user request sent while it warms is told so at once
(503 "warming up" with a short Retry-After); one sent after is answered at once.

The agent this test starts is the session's shared one afterwards (tests/engine_node/vllm_node.py, `start_fresh`):
the test runs first of the vLLM tests, and the others use its vLLM instead of starting their own.
"""

import urllib.request

import pytest

from controlplane.datasets.services.warmup import pool_warmup_assign, warmup_dataset_create
from controlplane.nodes.models import EngineNode
from controlplane.nodes.realtime import config_message
from controlplane.nodes.services.pools import pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node.conftest import SERVED_MODEL_NAME
from tests.engine_node.fleet import wait_until
from tests.engine_node.vllm_node import QUEUE_TIMEOUT_S

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vllm(shared_node="starts"), pytest.mark.agents]

MESSAGES = 20
DOCUMENT = {
    "inference_params": {
        "max_tokens": {"whitelist": [], "default": 16, "streaming_threshold": 16, "continuation_max_rounds": 0},
        "degradation": {"max_tokens": 16},
        "batch": {"long_context_threshold": 512},
        "engine": {"max_model_len": 1024, "max_num_seqs": 4, "served_model_name": SERVED_MODEL_NAME},
        # Generous on two shared CPU cores; the point is real figures and the gate, not a tight SLO.
        "warmup": {"initial_concurrency": 2, "step_s": 5, "check_requests": MESSAGES, "max_p99_s": 30},
    }
}


def test_a_node_on_real_vllm_warms_up_before_it_serves(vllm_node, sre):
    pool, node = vllm_node.pool, vllm_node.node
    template = template_create(actor=sre, name="tiny")
    v1 = template_version_create(actor=sre, template=template, document=DOCUMENT, base_number=None)
    pool_publish(actor=sre, pool=pool, version=v1, reason="tiny model")
    csv = "text,intent\n" + "".join(f"Where is my order number {i}?,order_status\n" for i in range(MESSAGES))
    dataset = warmup_dataset_create(actor=sre, name="cpu-top-queries", content=csv.encode(), fmt="csv")
    pool_warmup_assign(actor=sre, pool=pool, version=dataset.versions.get(number=1), reason="warm the tiny model")
    # The config the node applied before (its last good one): the agent starts vLLM on it and nothing restarts it.
    agent = vllm_node.start_fresh(config_message(v1)["text"])
    # The gateway listens from the engine's start, but its gate stays shut until the warmup passes.
    early = agent.health()
    assert early["status"] == "warming", early
    status, refusal = agent.chat("Where is my order?", timeout_s=QUEUE_TIMEOUT_S + 60)
    wait_until(lambda: EngineNode.objects.get(pk=node.pk).warmup_state == "passed", 120, "the warmup to pass")

    progress = agent.health()["warmup"]
    assert progress["state"] == "passed" and progress["trigger"] == "start", progress
    assert progress["done"] == progress["total"] == MESSAGES and progress["errors"] == 0, progress
    assert progress["check_requests"] == MESSAGES and progress["max_concurrency"] == 2, progress
    # Real latencies from vLLM: positive and ordered (the check judged them against its line: it passed).
    assert 0 < progress["p50"] <= progress["p99"], progress
    assert progress["check_p99"] == progress["p99"] and progress["check_error_rate"] == 0.0, progress
    # The request sent while the node warmed was refused by the warming gate (not held for the queue timeout, whose
    # refusal says otherwise), saying why and when to come back.
    assert status == 503, (status, refusal)
    assert "warming up" in refusal["error"]["message"] and 1 <= int(refusal["retry_after"]) <= 5, refusal

    row = EngineNode.objects.get(pk=node.pk)
    assert row.warmup_progress["done"] == MESSAGES and row.applied_hash == v1.content_hash
    assert agent.health()["status"] == "online"
    assert agent.chat("Thanks!", timeout_s=60)[0] == 200
    assert agent.health()["engine_pid"]
    # One vLLM start: no cold restart happened on the way.
    metrics = urllib.request.urlopen(f"{agent.url}/metrics", timeout=10).read().decode()
    assert "engine_node_engine_restarts_total{" not in metrics, metrics
    assert 'engine_node_warmups_total{result="passed",trigger="start"} 1.0' in metrics
    print(f"warmup on vLLM CPU: p50 {progress['p50']} s, p99 {progress['p99']} s, {progress['elapsed_s']} s")
