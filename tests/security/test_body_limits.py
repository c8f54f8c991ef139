"""A client with a valid key must not hold a node's event loop with the shape of its body. Bodies up to the 8 MiB limit
used to be parsed into Python objects, walked and re-serialised on the gateway's loop: a few hundred thousand tiny
messages or content parts held `/healthz` for half a second or more per request. Now the body is decoded by msgspec
into typed structures whose limits (messages, parts, name lengths, nesting) refuse it before any Python code walks
it, with a 400 naming the field; nothing reaches the engine. What it costs is in bench/gateway.py; here, the limits,
the shapes a client might try around them, and what passes through unchanged. Against the real gateway in this
process (tests/security/gateway_world.py).
"""

import asyncio
import json

import pytest

from engine_node.request_types import MAX_MESSAGES, MAX_PARTS, MAX_PARTS_PER_MESSAGE
from tests.security.gateway_world import run

GRANTS = {"shop": []}
AMOUNT = "订单 DD20241111887766 实付 ¥1299.00"


def chat(messages, **extra) -> dict:
    return {"model": "m", "messages": messages, "max_tokens": 16, **extra}


def tiny(n: int) -> list[dict]:
    return [{"role": "user", "content": "x"}] * n


def parts(n: int) -> list[dict]:
    return [{"type": "text", "text": "x"}] * n


async def _post(world, body):
    answer = await world.post("/v1/chat/completions", body, key="shop")
    return answer, list(world.engine.bodies)


@pytest.mark.parametrize(
    "body, where",
    [
        (chat(tiny(MAX_MESSAGES + 1)), "messages: expected `array` of length <= 4096"),
        (chat([{"role": "user", "content": parts(MAX_PARTS_PER_MESSAGE + 1)}]), "messages[0].content: expected"),
        (chat([{"role": "user", "content": parts(MAX_PARTS_PER_MESSAGE)}] * (MAX_PARTS // MAX_PARTS_PER_MESSAGE + 1)),
         f"more than {MAX_PARTS} content parts"),
        (chat([{"role": "u" * 100_000, "content": "hi"}]), "messages[0].role: expected `str` of length <= 64"),
        (chat([{"role": "user", "content": [{"type": "t" * 100_000, "text": "hi"}]}]), "messages[0].content[0].type"),
        (chat([{"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": "{}"}}] * 129}]),
         "messages[0].tool_calls: expected `array` of length <= 128"),
    ],
)  # fmt: skip
def test_a_body_past_a_limit_is_refused_naming_the_field_and_never_forwarded(body, where):
    (status, _, answer), forwarded = run(GRANTS, lambda world: _post(world, body))
    assert status == 400 and answer["error"]["param"] == "messages", answer
    assert where in answer["error"]["message"], answer
    assert forwarded == []


def test_a_maximum_size_body_of_tiny_messages_is_refused_before_it_is_walked():
    raw = json.dumps(chat(tiny(260_000)), separators=(",", ":")).encode()
    assert len(raw) < 8 * 1024 * 1024
    (status, _, answer), forwarded = run(GRANTS, lambda world: _post(world, raw))
    assert status == 400 and answer["error"]["param"] == "messages" and forwarded == []


def test_nesting_past_the_decoders_bound_is_refused_as_a_whole_body():
    deep = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"extra":' + b"[" * 5000 + b"]" * 5000 + b"}"
    (status, _, answer), forwarded = run(GRANTS, lambda world: _post(world, deep))
    assert status == 400 and answer["error"]["param"] is None and "nests too deeply" in answer["error"]["message"]
    assert forwarded == []


def test_fields_the_gateway_does_not_read_reach_the_engine_as_sent():
    extra = {
        "guided_json": {"type": "object", "properties": {"a": {"type": "array", "items": [[[[1.0e-5]]]]}}},
        "vllm_xargs": {"k": "v"},
        "repetition_penalty": 1.05,
        "stop": ["\n\n", "。"],
    }
    messages = [
        {"role": "system", "content": "你是客服", "name": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
    ]
    (status, _, _), forwarded = run(GRANTS, lambda world: _post(world, chat(messages, **extra)))
    assert status == 200
    ((_, sent),) = forwarded
    assert sent["messages"] == messages
    assert {key: sent[key] for key in extra} == extra
    assert "business_tag" not in sent and sent["max_tokens"] <= 16


@pytest.mark.parametrize(
    "raw",
    [
        # A duplicated key: the policy reads the value the engine will read (the last), in a message and at the top.
        b'{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi","content":"'
        + AMOUNT.encode()
        + b'"}]}',
        b'{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],'
        b'"messages":[{"role":"user","content":"' + AMOUNT.encode() + b'"}]}',
        b'{"model":"m","max_tokens":16,"messages":[{"role":"user","content":[{"type":"image_url","type":"text",'
        b'"text":"' + AMOUNT.encode() + b'"}]}]}',
    ],
)
def test_a_duplicated_key_is_read_as_the_engine_reads_it(raw):
    (status, headers, _), forwarded = run(GRANTS, lambda world: _post(world, raw))
    assert status == 200 and headers["X-Policy-Tier"] == "strict", headers
    assert AMOUNT in json.dumps(forwarded, ensure_ascii=False)


def test_healthz_is_answered_while_a_maximum_size_body_is_on_its_way():
    """A health check sent after a maximum-size body started arriving is answered before that body is; the body is
    then refused without reaching the engine."""
    raw = json.dumps(chat(tiny(260_000)), separators=(",", ":")).encode()
    half = len(raw) // 2

    async def scenario(world):
        healthz_done = asyncio.Event()
        order = []

        async def body():
            yield raw[:half]
            await healthz_done.wait()  # the rest only once the health check is answered
            yield raw[half:]

        headers = {"Authorization": f"Bearer {world.keys['shop']}", "Content-Type": "application/json"}
        sent = asyncio.create_task(world.http.post(f"{world.url}/v1/chat/completions", data=body(), headers=headers))
        await asyncio.sleep(0)
        async with world.http.get(f"{world.url}/healthz") as response:
            order.append(("healthz", response.status))
        healthz_done.set()
        async with await sent as response:
            order.append(("body", response.status, json.loads(await response.read())["error"]["param"]))
        return order, list(world.engine.bodies)

    order, forwarded = run(GRANTS, scenario)
    assert order == [("healthz", 200), ("body", 400, "messages")]
    assert forwarded == []
