"""The simulator speaks vLLM's OpenAI protocol: SSE chunk sequences, bodies, usage, errors, model list, version."""

import json

import pytest

from tests.engine_node.simulator.conftest import chat_body

pytestmark = pytest.mark.subprocess

SENTENCE_ENDS = (".", "。")


def _content_chunks(payloads: list[str]) -> list[dict]:
    return [json.loads(p) for p in payloads[:-1]]


def test_chat_stream_is_role_chunk_content_chunks_finish_usage_done(simulator):
    result, payloads = simulator.stream(
        "/v1/chat/completions", chat_body("Tell me a story", max_tokens=30, stream_options={"include_usage": True})
    )

    assert result.status == 200
    assert result.headers["Content-Type"].startswith("text/event-stream")
    assert result.headers["X-Simulated"] == "true"
    assert payloads[-1] == "[DONE]"
    chunks = _content_chunks(payloads)
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    usage_chunk, content = chunks[-1], chunks[1:-1]
    assert usage_chunk["choices"] == []
    assert [c["choices"][0]["finish_reason"] for c in content[:-1]] == [None] * (len(content) - 1)
    assert content[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    usage = usage_chunk["usage"]
    assert usage["completion_tokens"] == len(content)  # one token per step without speculative decoding
    assert usage["prompt_tokens"] == 9  # "Tell me a story": 4 ASCII tokens + 5 template tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_stream_without_include_usage_has_no_usage_chunk(simulator):
    _, payloads = simulator.stream("/v1/chat/completions", chat_body("hi", max_tokens=5))

    chunks = _content_chunks(payloads)
    assert all(c["choices"] for c in chunks)
    assert "usage" not in chunks[-1]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_finish_reason_length_cuts_mid_sentence_at_max_tokens(simulator):
    # The profile's shortest reply is 4 tokens, so 3 always cuts it.
    _, payloads = simulator.stream(
        "/v1/chat/completions", chat_body("Why?", max_tokens=3, stream_options={"include_usage": True})
    )

    chunks = _content_chunks(payloads)
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks[1:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 3
    assert not text.endswith(SENTENCE_ENDS)


def test_finish_reason_stop_ends_a_sentence_before_max_tokens(simulator):
    # The profile's longest reply is 40 tokens, so 100 is never reached.
    result = simulator.chat("Explain batching", max_tokens=100)

    choice = result.json["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"].endswith(SENTENCE_ENDS)
    assert 4 <= result.json["usage"]["completion_tokens"] <= 40


def test_text_completion_stream_and_body(simulator):
    _, payloads = simulator.stream(
        "/v1/completions",
        {"prompt": "Once upon a time", "max_tokens": 6, "stream_options": {"include_usage": True}},
    )
    chunks = _content_chunks(payloads)
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert "delta" not in chunks[0]["choices"][0]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"] == {"prompt_tokens": 4, "total_tokens": 10, "completion_tokens": 6,
                                   "prompt_tokens_details": None}  # fmt: skip

    body = simulator.post("/v1/completions", {"prompt": [1, 2, 3, 4, 5], "max_tokens": 2}).json
    assert body["object"] == "text_completion"
    assert body["usage"]["prompt_tokens"] == 5
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["choices"][0]["text"]


def test_non_streaming_chat_body_has_vllms_shape(simulator):
    result = simulator.chat("你好，世界", max_tokens=8, model="chat")

    assert result.status == 200
    assert result.headers["X-Simulated"] == "true"
    body = result.json
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "chat"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in ("stop", "length")
    assert body["usage"]["prompt_tokens"] == 10  # 5 CJK characters, 1 token each, + 5 template tokens
    assert body["usage"]["completion_tokens"] <= 8


@pytest.mark.parametrize(
    ("body", "status", "error_type", "message"),
    [
        (chat_body("hi", n=2), 400, "BadRequestError", "n=2"),
        (chat_body("hi", max_tokens=5000), 400, "BadRequestError", "maximum context length is 4096 tokens"),
        (chat_body("x" * 20000), 400, "BadRequestError", "maximum context length is 4096 tokens"),
        (chat_body("hi", max_tokens=0), 400, "BadRequestError", "max_tokens must be at least 1"),
        (chat_body("hi", stream_options={"include_usage": True}), 400, "BadRequestError", "stream=True"),
        (chat_body("hi", model="other"), 404, "NotFoundError", "The model `other` does not exist."),
        ({"messages": []}, 400, "BadRequestError", "messages"),
    ],
)
def test_invalid_requests_get_vllms_error_body(simulator, body, status, error_type, message):
    result = simulator.post("/v1/chat/completions", body)

    assert result.status == status
    error = result.json["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == error_type
    assert error["code"] == status
    assert message in error["message"]


def test_models_and_version_say_simulated(simulator):
    models = simulator.get("/v1/models").json
    version = simulator.get("/version").json

    assert models["object"] == "list"
    assert [(m["id"], m["owned_by"]) for m in models["data"]] == [("chat", "vllm-simulator")]
    assert version == {"version": "0.32.0-simulated", "simulated": True}
    assert simulator.get("/health").status == 200


def test_official_openai_client_streams_and_reads_usage(simulator):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=simulator.url + "/v1", api_key="unused")

    stream = client.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "Hello"}],
        max_tokens=7,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == 7
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert text

    completion = client.completions.create(model="chat", prompt="Hi", max_tokens=2)
    assert completion.usage.completion_tokens == 2
    assert [m.id for m in client.models.list()] == ["chat"]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "x"}], n=2)
