"""A memory cleanup on the real vLLM CPU build, end to end through the control plane.

The session's agent (tests/engine_node/vllm_node.py) runs vLLM with its worker extension (engine_node/vllm_worker),
reads the workers' figures through /collective_rpc every few seconds without wedging the engine, and an SRE's
cleanup drains (the request in flight finishes), resets the prefix cache (/reset_prefix_cache answers success),
calls the workers' release (nothing to release on CPU) and resumes. On CPU there is no caching allocator:
fragmentation is recorded as null, never a made-up number, while KV-cache usage is the engine's own gauge.
"""

import json
import threading
import time
import urllib.request

import pytest
from django.utils import timezone

from controlplane.alerts import coverage
from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import Alert, AlertRule, AlertRuleVersion
from controlplane.nodes.models import EngineNode, NodeCommand
from controlplane.nodes.services.engine_nodes import node_command_request
from controlplane.nodes.services.pools import pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from engine_node.telemetry.memory import CPU_BUILD
from tests.engine_node.conftest import SERVED_MODEL_NAME
from tests.engine_node.fleet import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vllm, pytest.mark.agents]

# Tokens: about as long as max_model_len allows, so the request is still running when the drain starts (the tiny
# model makes a few hundred tokens a second on two CPU cores).
LONG_REPLY = 960

DOCUMENT = {
    "inference_params": {
        "max_tokens": {"whitelist": [], "default": LONG_REPLY, "streaming_threshold": 16, "continuation_max_rounds": 0},
        "degradation": {"max_tokens": 16},
        "batch": {"long_context_threshold": 512},
        "engine": {"max_model_len": 1024, "max_num_seqs": 4, "served_model_name": SERVED_MODEL_NAME},
    }
}
# Succeeded operator cleanups on the agent's /metrics: the shared agent's count, so this test counts its own.
OPERATOR_CLEANUPS = 'engine_node_memory_cleanups_total{result="succeeded",trigger="operator"}'


def sample_value(exposition: str, sample: str) -> float:
    """The value of one sample (name and labels as written) in a Prometheus exposition; 0 while it is absent."""
    values = [float(line.rsplit(" ", 1)[1]) for line in exposition.splitlines() if line.startswith(sample + " ")]
    return values[-1] if values else 0.0


def agent_metrics(agent) -> str:
    return urllib.request.urlopen(f"{agent.url}/metrics", timeout=10).read().decode()


def test_cleanup_on_real_vllm_drains_resets_the_prefix_cache_and_resumes(vllm_node, sre):
    pool, node = vllm_node.pool, vllm_node.node
    template = template_create(actor=sre, name="tiny")
    v1 = template_version_create(actor=sre, template=template, document=DOCUMENT, base_number=None)
    agent = vllm_node.connect()
    cleanups_before = sample_value(agent_metrics(agent), OPERATOR_CLEANUPS)
    pool_publish(actor=sre, pool=pool, version=v1, reason="tiny model")
    wait_until(lambda: EngineNode.objects.get(pk=node.pk).applied_hash == v1.content_hash, 240, "ACK of v1")
    assert agent.chat("Where is my order?", timeout_s=120)[0] == 200

    # The agent's own reading through the worker extension: honest nulls on CPU, no error.
    wait_until(lambda: (agent.health().get("memory") or {}).get("workers"), 30, "a memory reading")
    memory = agent.health()["memory"]
    assert memory["device"] == "cpu" and memory["workers"] >= 1, memory
    assert memory["fragmentation"] is None and memory["reserved_bytes"] is None
    assert "error" not in memory, memory
    assert 0 <= memory["kv_cache_usage"] <= 1

    # The 1 Hz sample says why fragmentation and SM activity are absent, the control plane stores it, and the
    # fragmentation rule is "no source" on this node, not green.
    def sample_says_why():
        m = (agent.health().get("sample") or {}).get("m") or {}
        return m if m.get("absent", {}).get("fragmentation_ratio") == CPU_BUILD else None

    m = wait_until(sample_says_why, 30, "a sample saying why fragmentation is absent")
    assert m["fragmentation_ratio"] is None and m["sm_util"] is None and m["absent"]["sm_util"]
    install_default_rules(AlertRule, AlertRuleVersion)  # the transactional test flushed the migration's pack

    def stored_sample_uncovered():
        uncovered = coverage.uncovered_by_node(now=timezone.now(), node=node.name).get(node.name, [])
        return {u["rule"]: u["reason"] for u in uncovered} or None

    uncovered = wait_until(stored_sample_uncovered, 30, "the stored sample's absent figures")
    assert uncovered["memory-fragmentation"] == CPU_BUILD
    report = evaluate()
    assert report.no_source >= 1 and not Alert.objects.filter(rule__name="memory-fragmentation").exists()

    # Two clients sending long requests back to back, of different lengths so they never finish together:
    # whenever the cleanup starts, one is in flight.
    outcomes: list[int] = []
    spans: list[tuple[float, float, int]] = []  # (sent, answered, outcome) on the wall clock
    stop = threading.Event()

    def long_requests(length: int):
        body = {
            "model": SERVED_MODEL_NAME,
            "messages": [{"role": "user", "content": "Tell me about returns."}],
            "max_tokens": length,
            "min_tokens": length,
            "ignore_eos": True,
        }
        while not stop.is_set():
            request = urllib.request.Request(
                f"{agent.url}/v1/chat/completions",
                data=json.dumps(body).encode(),
                headers=agent.headers,
            )
            sent = time.time()
            try:
                with urllib.request.urlopen(request, timeout=180) as response:
                    answer = json.loads(response.read())
                    tokens_ok = answer["usage"]["completion_tokens"] == length
                    outcomes.append(response.status if tokens_ok else -1)
            except OSError as exc:  # an HTTP error, reset or timeout is exactly what must not happen
                outcomes.append(getattr(exc, "code", 0))
            spans.append((sent, time.time(), outcomes[-1]))

    callers = [threading.Thread(target=long_requests, args=(n,)) for n in (LONG_REPLY, LONG_REPLY * 2 // 3)]
    for caller in callers:
        caller.start()
    try:
        # Both callers' requests may end in the instant between the command and the drain: then nothing was
        # in flight to wait for, and the run proves nothing, so the cleanup is asked for again (at most 5 times:
        # on a loaded machine the instant is longer).
        for _ in range(5):
            wait_until(lambda: agent.health()["in_flight"] >= 2, 60, "long requests in flight")
            requested_at = time.time()
            command = node_command_request(actor=sre, node=node, op="cleanup", reason="prefix-cache reset path")

            def finished(command=command) -> bool:
                command.refresh_from_db()
                return command.is_finished

            wait_until(finished, 180, "the cleanup to finish")
            if command.state != NodeCommand.State.SUCCEEDED or json.loads(command.result)["in_flight_at_drain"]:
                break
        answered = len(outcomes)
        wait_until(lambda: len(outcomes) >= answered + 2, 60, "requests answered after the resume")
    finally:
        stop.set()
        for caller in callers:
            caller.join(timeout=180)
    assert outcomes and set(outcomes) == {200}, outcomes
    assert command.state == NodeCommand.State.SUCCEEDED, command.result
    result = json.loads(command.result)
    # Something was in flight at the drain, and the drain waited for it to finish: a request sent before the
    # cleanup was asked for and answered after it got its 200 with every token.
    assert result["in_flight_at_drain"] >= 1 and result["drained_s"] > 0, result
    spanning = [outcome for sent, done, outcome in spans if sent < requested_at < done]
    assert spanning and set(spanning) == {200}, (spans, requested_at)
    assert result["prefix_cache_reset"] is True
    assert result["released"] == {"workers": memory["workers"]}  # empty_cache has nothing to do on CPU
    assert result["before"]["device"] == result["after"]["device"] == "cpu"
    assert result["before"]["fragmentation"] is None and result["after"]["fragmentation"] is None
    # The engine's own gauge (a fraction of a per cent here: 2 sequences in a 1 GiB CPU cache), never a guess.
    assert 0 <= result["before"]["kv_cache_usage"] <= 1
    assert result["after"]["kv_cache_usage"] == 0.0  # drained: nothing holds a block
    assert agent.health()["status"] == "online"
    assert agent.chat("Thanks!", timeout_s=120)[0] == 200
    metrics = agent_metrics(agent)
    cleanups = NodeCommand.objects.filter(node=node, op="cleanup").count()
    assert sample_value(metrics, OPERATOR_CLEANUPS) == cleanups_before + cleanups, metrics
    assert 'engine_node_memory_cleanup_fragmentation_ratio{phase="after"} NaN' in metrics
