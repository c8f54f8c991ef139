"""Smoke test of the real vLLM CPU build serving the generated tiny Llama model."""

import pytest

from tests.engine_node.conftest import SERVED_MODEL_NAME, metric_value

pytestmark = pytest.mark.vllm


def test_tiny_model_serves_chat_and_exports_metrics(start_vllm):
    server = start_vllm()
    before = server.metrics()
    assert metric_value(before, "vllm:num_requests_running") is not None
    generated_before = metric_value(before, "vllm:generation_tokens_total")
    assert generated_before is not None

    # ignore_eos: a random-weight model may pick EOS first; this makes the token count exact.
    reply = server.chat("我的订单到哪里了？ Where is my order?", max_tokens=8, temperature=0, ignore_eos=True)
    assert reply["model"] == SERVED_MODEL_NAME
    choice = reply["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["message"]["content"]
    assert choice["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 8

    after = server.metrics()
    assert metric_value(after, "vllm:num_requests_running") == 0
    assert metric_value(after, "vllm:generation_tokens_total") >= generated_before + 8

    assert server.stop() == 0
