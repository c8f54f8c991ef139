"""The agent on the real vLLM CPU build with a tiny generated model, against the live control plane.

The session's agent on vLLM (tests/engine_node/vllm_node.py) serves a chat completion through the gateway,
exposes real vllm:* metrics, and applies a cold change (max_num_seqs) by drain and restart before ACKing; a
request arriving during the restart is queued or answered 503 with Retry-After, never left hanging or reset.
The restart leaves the engine on other flags, so this test runs last of those sharing the agent.
"""

import threading
import urllib.request

import pytest

from controlplane.nodes.models import EngineNode
from controlplane.nodes.services.pools import pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from engine_node.policy.rules import ends_mid_sentence
from tests.engine_node.conftest import SERVED_MODEL_NAME
from tests.engine_node.fleet import engine_cmdline, flag_value, wait_until
from tests.engine_node.vllm_node import QUEUE_TIMEOUT_S

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vllm(shared_node="changes"), pytest.mark.agents]


def document(max_num_seqs: int) -> dict:
    return {
        "inference_params": {
            # A small first-turn cap: the random-weight model rarely stops by itself, so replies are cut and continued.
            "max_tokens": {"whitelist": [], "default": 16, "streaming_threshold": 16},
            "degradation": {"max_tokens": 16},
            "batch": {"long_context_threshold": 512},
            "engine": {"max_model_len": 1024, "max_num_seqs": max_num_seqs, "served_model_name": SERVED_MODEL_NAME},
        }
    }


def test_agent_runs_real_vllm_and_applies_a_cold_change(vllm_node, tiny_model_dir, sre):
    pool, node = vllm_node.pool, vllm_node.node
    template = template_create(actor=sre, name="tiny")
    v1 = template_version_create(actor=sre, template=template, document=document(4), base_number=None)
    v2 = template_version_create(actor=sre, template=template, document=document(2), base_number=1)
    agent = vllm_node.connect()
    wait_until(lambda: EngineNode.objects.get(pk=node.pk).is_connected, 30, "the agent to connect")
    assert EngineNode.objects.get(pk=node.pk).engine_version.startswith("0.32")

    pool_publish(actor=sre, pool=pool, version=v1, reason="tiny model, 4 sequences")
    wait_until(lambda: EngineNode.objects.get(pk=node.pk).applied_hash == v1.content_hash, 240, "ACK of v1")
    status, body = agent.chat("Where is my order?")
    assert status == 200 and body["choices"][0]["message"]["content"] is not None
    assert body["usage"]["completion_tokens"] > 0
    check_openai_client(agent)
    metrics = urllib.request.urlopen(f"{agent.url}/metrics", timeout=10).read().decode()
    assert "vllm:num_requests_running" in metrics and "vllm:generation_tokens_total" in metrics
    assert "engine_node_gateway_requests_total" in metrics
    first_pid = agent.health()["engine_pid"]
    # Every option the agent passes to real vLLM is one `--flag=value` element, and vLLM reads it so.
    first_args = engine_cmdline(first_pid)
    assert flag_value(first_args, "--max-num-seqs") == "4" and "--max-num-seqs" not in first_args
    assert flag_value(first_args, "--served-model-name") == SERVED_MODEL_NAME
    assert flag_value(first_args, "--model") == str(tiny_model_dir)

    pool.refresh_from_db()
    pool_publish(actor=sre, pool=pool, version=v2, reason="cold change: 2 sequences")
    wait_until(lambda: agent.health()["status"] in {"draining", "restarting"}, 30, "the drain to start")
    during: dict = {}

    def request_during_restart():
        during["status"], during["body"] = agent.chat("退货怎么操作？", timeout_s=QUEUE_TIMEOUT_S + 60)

    caller = threading.Thread(target=request_during_restart)
    caller.start()
    caller.join(timeout=QUEUE_TIMEOUT_S + 90)
    assert not caller.is_alive(), "a request during the restart hung"
    assert during["status"] in (200, 503), during
    if during["status"] == 503:
        # Refused by the gate it waited at (closed for the restart, or warming up), never a client's time-out.
        assert int(during["body"]["retry_after"]) >= 1
        message = during["body"]["error"]["message"]
        assert message.startswith(("engine unavailable", "engine overloaded")) or "warming" in message, during

    wait_until(lambda: EngineNode.objects.get(pk=node.pk).applied_hash == v2.content_hash, 240, "ACK of v2")
    new_pid = agent.health()["engine_pid"]
    assert new_pid != first_pid
    # The old engine stopped on the agent's SIGTERM, within its grace (engine.py logs a SIGKILL otherwise).
    assert "ignored SIGTERM" not in agent.log_path.read_text(errors="replace")
    assert flag_value(engine_cmdline(new_pid), "--max-num-seqs") == "2"
    assert agent.chat("Thanks!")[0] == 200


STRICT_PROMPTS = (
    "我付了¥299.00怎么还显示未支付",
    "我付了¥19.90怎么还没发货",
    "订单金额¥88.00为什么扣了两次",
    "我付了¥45.50但是订单取消了",
    "退款¥120.00什么时候到账",
)


def check_openai_client(agent) -> None:
    """The official client, plain and streaming, through the gateway's policy to real vLLM."""
    client = agent.openai_client(timeout_s=120)
    # vLLM continues its own partial reply (continue_final_message) when the 16-token cap cuts it mid-sentence. A
    # cut may land on a full stop (then, rightly, nothing is continued), so a few prompts: one must be continued.
    rounds = 0
    for prompt in STRICT_PROMPTS:
        raw = client.chat.completions.with_raw_response.create(
            model=SERVED_MODEL_NAME,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=64,
            extra_body={"ignore_eos": True},  # every round runs to the cap: "length", never an early stop
        )
        assert (raw.headers["X-Policy-Tier"], raw.headers["X-Policy-Max-Tokens"]) == ("strict", "16")
        reply = raw.parse()
        rounds = int(raw.headers["X-Continuation-Rounds"])
        if rounds >= 1:
            break
        content = reply.choices[0].message.content
        # Not continued: the product's own sentence rule says the cut ended a sentence (a full stop, an emoji, a
        # paragraph break), which the random-weight model lands on now and then.
        assert not ends_mid_sentence(content), content
    assert rounds >= 1, "no reply cut mid-sentence was continued"
    # The continuation's tokens are the reply's: more than one round's cap, at most one cap per round.
    assert 16 < reply.usage.completion_tokens <= 16 * (1 + rounds)
    chunks = list(
        client.chat.completions.create(
            model=SERVED_MODEL_NAME,
            messages=[{"role": "user", "content": "Can you recommend a gift?"}],
            max_tokens=64,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert len({c.id for c in chunks}) == 1
    assert len([c for c in chunks if c.choices and c.choices[0].finish_reason]) == 1
    assert next(c.usage for c in chunks if c.usage).completion_tokens > 0
    assert chunks[-1].model_extra["x_final"] is True
    assert client.models.list().data[0].id == SERVED_MODEL_NAME
