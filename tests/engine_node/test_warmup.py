"""Warmup runs on an agent running the simulator, against the real control plane (daphne, Redis, Postgres).

The pool has a warmup dataset of 60 messages. The agent starts with nothing on disk, gets the dataset in answer
to its hello, replays it before its gate opens, passes and serves. A new cold config (fp8, which this profile
makes 100 times slower) fails the check over the first 40 requests: the node restarts on the previous config,
warms it up, serves, NACKs the new version with the P99 it saw, and the warmup-failed alert fires.
"""

import re
import urllib.request

import pytest

from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import Alert, AlertRule, AlertRuleVersion
from controlplane.datasets.services.warmup import pool_warmup_assign, warmup_dataset_create
from controlplane.nodes.models import EngineNode
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node.fleet import AgentProcess, start_agents, wait_until
from tests.live_server import Daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

SLOW_FP8_PROFILE = """
latency:
  time_scale: 0.05
reply_length:
  median: 12
  sigma: 0.3
  min: 4
  max: 16
supported_quantizations:
  fp8: 100.0
"""
MESSAGES, CHECKED = 60, 40
WARMUP = {
    "initial_concurrency": 10, "check_requests": CHECKED, "max_p99_s": 0.5, "step_s": 5, "max_duration_s": 120
}  # fmt: skip


def document(**engine) -> dict:
    return {
        "inference_params": {
            "max_tokens": {"whitelist": [], "continuation_max_rounds": 0, "default": 16, "streaming_threshold": 16},
            "degradation": {"max_tokens": 16},
            "warmup": WARMUP,
            "engine": engine,
        }
    }


def node_row(name: str) -> EngineNode:
    return EngineNode.objects.get(name=name)


def warmups(agent, trigger: str, result: str) -> float:
    """The node's own count of warmups (`engine_node_warmups_total`) with this trigger and result."""
    with urllib.request.urlopen(f"{agent.url}/metrics", timeout=10) as response:
        text = response.read().decode()
    pattern = rf'^engine_node_warmups_total{{(?=[^}}]*trigger="{trigger}")(?=[^}}]*result="{result}")[^}}]*}} (\S+)$'
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_a_node_warms_up_before_serving_and_a_slow_cold_config_rolls_back(tmp_path, sre):
    profile = tmp_path / "slow-fp8.yaml"
    profile.write_text(SLOW_FP8_PROFILE)
    server = Daphne(tmp_path)
    server.start()
    pool = pool_create(actor=sre, name="staging", is_production=False)
    template = template_create(actor=sre, name="chat")
    v1 = template_version_create(actor=sre, template=template, document=document(), base_number=None)
    pool_publish(actor=sre, pool=pool, version=v1, reason="first")
    csv = "text\n" + "".join(f"我的订单{i}到哪了？\n" for i in range(MESSAGES))
    dataset = warmup_dataset_create(actor=sre, name="top-queries", content=csv.encode(), fmt="csv")
    pool_warmup_assign(actor=sre, pool=pool, version=dataset.versions.get(number=1), reason="festival warmup")
    _, token = node_create(actor=sre, name="gpu-1", pool=pool)
    agent = AgentProcess(
        name="gpu-1",
        token=token,
        control_plane_url=server.ws_agent_url,
        work=tmp_path,
        profile=profile,
        queue_timeout_s=60,
    )
    try:
        start_agents([agent])
        wait_until(lambda: node_row("gpu-1").warmup_state == "passed", 60, "a warmup to pass")
        # The start-up warmup passed; v1's engine flags differ from those the node started on, so a config warmup
        # follows. Reports within one batch (0.5 s) are stored newest last, so the start's is read off the node.
        wait_until(lambda: warmups(agent, "start", "passed") == 1, 60, "the start-up warmup on the node's counter")
        wait_until(lambda: node_row("gpu-1").applied_hash == v1.content_hash, 30, "ACK of v1")
        wait_until(lambda: agent.health()["status"] == "online", 30, "the gate to open")
        # Read the row once it reports the warmup the node ran last: right after the ACK it may still hold the
        # start-up warmup's result, or the config warmup's progress part way.
        ran_last = agent.health()["warmup"]["trigger"]
        wait_until(
            lambda: (n := node_row("gpu-1")).warmup_state == "passed" and n.warmup_progress.get("trigger") == ran_last,
            10,
            f"the node's row to report its last warmup ({ran_last})",
        )
        node = node_row("gpu-1")
        assert node.warmup_progress["trigger"] in {"start", "config"}
        assert node.warmup_progress["done"] == MESSAGES and node.warmup_progress["check_requests"] == CHECKED
        assert node.warmup_progress["p99"] <= 0.5
        assert agent.chat()[0] == 200

        v2 = template_version_create(
            actor=sre, template=template, document=document(quantization="fp8"), base_number=v1.number
        )
        pool_publish(actor=sre, pool=pool, version=v2, reason="try fp8")
        wait_until(lambda: node_row("gpu-1").last_nack_hash == v2.content_hash, 120, "the NACK of v2")
        node = node_row("gpu-1")
        assert node.last_nack_error.startswith("warmup failed: p99 "), node.last_nack_error
        assert f"> 0.5 s over the first {CHECKED} requests" in node.last_nack_error
        assert node.applied_hash == v1.content_hash
        # The NACK is stored at once, warmup reports in 0.5 s batches: the failure's time may land a moment later.
        wait_until(lambda: node_row("gpu-1").warmup_failed_at is not None, 10, "the failed warmup to be stored")

        # Back on v1, warmed up again and serving.
        wait_until(lambda: node_row("gpu-1").warmup_progress.get("trigger") == "rollback", 60, "the rollback warmup")
        wait_until(lambda: agent.health()["status"] == "online", 60, "the gate to reopen")
        assert agent.health()["applied"] == f"chat v{v1.number}"
        # Warmup reports reach the database in 0.5 s batches, so it may say "passed" a moment after the node does.
        wait_until(lambda: node_row("gpu-1").warmup_state == "passed", 10, "the rollback warmup's pass to be stored")
        assert agent.chat()[0] == 200

        # Transactional tests empty the tables, the migration-installed rule pack included.
        install_default_rules(AlertRule, AlertRuleVersion)
        evaluate()
        alert = Alert.objects.get(rule__name="warmup-failed", name="gpu-1")
        assert alert.state == Alert.State.FIRING
    finally:
        agent.stop()
        server.stop()
