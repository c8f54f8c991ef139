"""max_tokens.streaming_threshold on a real agent and simulated engine: a client that accepts JSON or a stream gets a
short reply whole and a long one streamed once it passes the threshold; a client that accepts only JSON gets JSON."""

import json
import urllib.request

import pytest

from tests.engine_node.fleet import wait_until
from tests.engine_node.test_gateway_policy import start_node

pytestmark = pytest.mark.agents

EITHER = "text/event-stream, application/json"
# The simulator's replies are 40-90 tokens (LONG_REPLIES): within a threshold of 100, past one of 100 when the request
# asks for at least 110 tokens (vLLM's min_tokens).
PARAMS = {"max_tokens": {"default": 128, "streaming_threshold": 100, "continuation_max_rounds": 0}}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    agent = start_node(tmp_path_factory, "long-replies-node", params=PARAMS)
    yield agent
    agent.stop()


def post(node, extra: dict, accept: str | None):
    body = {"model": "simulated-chat-model", "messages": [{"role": "user", "content": "退货怎么退"}], "seed": 5}
    headers = {"Content-Type": "application/json", **node.headers}
    if accept:
        headers["Accept"] = accept
    request = urllib.request.Request(
        f"{node.url}/v1/chat/completions", data=json.dumps({**body, **extra}).encode(), headers=headers
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers, response.read().decode()


def streamed_text(raw: str) -> tuple[str, list[dict]]:
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices"))
    return text, chunks


def test_a_reply_that_ends_within_the_threshold_comes_back_whole_as_json(node):
    headers, raw = post(node, {}, EITHER)
    assert headers["Content-Type"].startswith("application/json") and "X-Streamed-After-Tokens" not in headers
    answer = json.loads(raw)
    assert answer["object"] == "chat.completion" and answer["choices"][0]["finish_reason"] == "stop"
    assert 40 <= answer["usage"]["completion_tokens"] <= 90
    # The same reply as the plain JSON path gives (same seed).
    _, plain = post(node, {}, None)
    message = json.loads(plain)["choices"][0]["message"]
    assert (message["role"], message["content"]) == ("assistant", answer["choices"][0]["message"]["content"])


def test_a_reply_that_runs_past_the_threshold_is_streamed_from_its_first_token(node):
    headers, raw = post(node, {"min_tokens": 110}, EITHER)
    assert headers["Content-Type"].startswith("text/event-stream") and headers["X-Streamed-After-Tokens"] == "100"
    assert headers["X-Session-Id"]  # resumable like any stream
    text, chunks = streamed_text(raw)
    assert raw.rstrip().endswith("data: [DONE]")
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage and usage[0]["completion_tokens"] >= 110  # the whole answer's usage, as JSON would carry it
    # Nothing lost at the switch: the text is the one a JSON-only client gets for the same request.
    _, plain = post(node, {"min_tokens": 110}, "application/json")
    assert json.loads(plain)["choices"][0]["message"]["content"] == text


def test_a_request_that_cannot_pass_the_threshold_or_needs_json_takes_the_json_path(node):
    headers, raw = post(node, {"min_tokens": 100, "max_tokens": 100}, EITHER)  # its max_tokens is the threshold
    assert headers["Content-Type"].startswith("application/json") and json.loads(raw)["usage"]
    headers, raw = post(node, {"min_tokens": 110, "logprobs": True}, EITHER)
    assert headers["Content-Type"].startswith("application/json")


def test_the_streamed_and_joined_requests_count_in_the_nodes_sample(node):
    def sample_with_ttft():
        sample = node.health().get("sample")
        return sample if sample and sample["m"]["ttft_p50_s"] is not None else None

    sample = wait_until(sample_with_ttft, 10, "a sample with a time to first token")
    assert 0 < sample["m"]["ttft_p50_s"] <= sample["m"]["latency_p999_s"]
