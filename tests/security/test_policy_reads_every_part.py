"""The strict tier reads every text the engine will read. It used to read only the `text` parts of the latest `user`
message, so an amount or an order number sent as an `input_text` part, in a system, developer or tool message, in an
assistant's reasoning or tool-call arguments, reached the model at the creative tier's temperature, and a question sent
that way was never sampled for review. Now every message of every role is read, each text-bearing part and field, and a
part type the gateway cannot read as text (embeddings, tool references, anything unknown) is refused with a 400 naming
it. Against the real gateway in this process (tests/security/gateway_world.py).
"""

import pytest

from engine_node.policy.rules import CONVERSATION_EDGE_CHARS, strict_scope
from tests.security.gateway_world import run

# `copywriting` maps to the creative tier: a regex hit must still win over it.
GRANTS = {"shop": ["copywriting"]}
AMOUNT = "订单 DD20241111887766 实付 ¥1299.00"
QUESTION = {"role": "user", "content": "帮我写一段商品文案"}


def body(*messages) -> dict:
    return {"model": "m", "messages": list(messages), "max_tokens": 16, "business_tag": "copywriting"}


HIDING_PLACES = {
    "input_text part": body({"role": "user", "content": [{"type": "input_text", "text": AMOUNT}]}),
    "output_text part": body(QUESTION, {"role": "user", "content": [{"type": "output_text", "text": AMOUNT}]}),
    "text after an image": body({"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}, {"type": "text", "text": AMOUNT}]}),
    "system": body({"role": "system", "content": AMOUNT}, QUESTION),
    "developer": body({"role": "developer", "content": AMOUNT}, QUESTION),
    "developer parts": body({"role": "developer", "content": [{"type": "text", "text": AMOUNT}]}, QUESTION),
    "tool": body(QUESTION, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "order", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": AMOUNT}),
    "tool-call arguments": body(QUESTION, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "order", "arguments": f'{{"q": "{AMOUNT}"}}'}}]}),
    "function": body(QUESTION, {"role": "function", "name": "order", "content": AMOUNT}),
    "assistant prefill": body(QUESTION, {"role": "assistant", "content": AMOUNT}),
    "assistant reasoning": body(QUESTION, {"role": "assistant", "content": "好的", "reasoning_content": AMOUNT}),
    "assistant reasoning (new name)": body(QUESTION, {"role": "assistant", "content": "好的", "reasoning": AMOUNT}),
    "refusal part": body(QUESTION, {"role": "assistant", "content": [{"type": "refusal", "refusal": AMOUNT}]}),
    "thinking part": body(QUESTION, {"role": "assistant", "content": [{"type": "thinking", "thinking": AMOUNT}]}),
    "refusal field": body(QUESTION, {"role": "assistant", "content": None, "refusal": AMOUNT}),
    "system prompt of a long conversation": body(
        {"role": "system", "content": AMOUNT},
        *[{"role": role, "content": "聊聊天气" * 300} for role in ("user", "assistant") * 10],
        QUESTION,
    ),
    "latest turn of a long conversation": body(
        {"role": "system", "content": "你是客服"},
        *[{"role": role, "content": "聊聊天气" * 300} for role in ("user", "assistant") * 10],
        {"role": "user", "content": [{"type": "input_text", "text": AMOUNT}]},
    ),
}  # fmt: skip


async def _each(world, bodies):
    return [await world.post("/v1/chat/completions", b, key="shop") for b in bodies], list(world.engine.bodies)


def test_an_amount_anywhere_in_the_request_gets_the_strict_tier():
    answers, forwarded = run(GRANTS, lambda world: _each(world, list(HIDING_PLACES.values())))
    for name, (status, headers, answer) in zip(HIDING_PLACES, answers, strict=True):
        assert status == 200, (name, answer)
        assert (headers["X-Policy-Tier"], headers["X-Policy-Rule"]) == ("strict", "regex"), name
    assert [sent["temperature"] for _, sent in forwarded] == [0.3] * len(HIDING_PLACES)


def test_without_the_amount_the_same_requests_keep_their_tag_tier():
    # The control: the tag's creative tier holds when no message carries an amount, so the hits above are the parts'.
    plain = body({"role": "system", "content": "你是客服"}, {"role": "user", "content": [
        {"type": "input_text", "text": "帮我写一段"}, {"type": "text", "text": "商品文案"}]})  # fmt: skip
    ((status, headers, _),), _ = run(GRANTS, lambda world: _each(world, [plain]))
    assert status == 200 and (headers["X-Policy-Tier"], headers["X-Policy-Rule"]) == ("creative", "business_tag")


UNREADABLE = [
    ({"type": "image_embeds", "image_embeds": "AAAA"}, "image_embeds"),
    ({"type": "prompt_embeds", "data": "AAAA"}, "prompt_embeds"),
    ({"type": "audio_embeds", "audio_embeds": "AAAA"}, "audio_embeds"),
    ({"type": "tool_reference", "name": "order"}, "tool_reference"),
    ({"type": "file", "file": {"file_data": "AAAA"}}, "file"),
    ({"type": "TEXT", "text": AMOUNT}, "TEXT"),
    ({"type": "text ", "text": AMOUNT}, "text "),
]


@pytest.mark.parametrize("part, part_type", UNREADABLE, ids=[t for _, t in UNREADABLE])
def test_a_part_the_gateway_cannot_read_is_refused_naming_it(part, part_type):
    request = body({"role": "developer", "content": [{"type": "text", "text": "hi"}, part]}, QUESTION)
    ((status, _, answer),), forwarded = run(GRANTS, lambda world: _each(world, [request]))
    assert status == 400
    assert answer["error"]["param"] == "messages"
    assert "messages[0].content[1].type" in answer["error"]["message"] and repr(part_type) in answer["error"]["message"]
    assert forwarded == []


@pytest.mark.parametrize(
    "message, where",
    [
        ({"role": "user", "content": [{"type": "input_text", "text": ["¥1299"]}]}, "messages[0].content[0]"),
        ({"role": "user", "content": [{"type": "refusal", "text": AMOUNT}]}, "messages[0].content[0]"),
        ({"role": "assistant", "content": "", "reasoning_content": {"t": AMOUNT}}, "messages[0].reasoning_content"),
        ({"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": {"q": AMOUNT}}}]},
         "messages[0].tool_calls[0].function.arguments"),
        ({"role": "assistant", "content": "", "tool_calls": {"function": {}}}, "messages[0].tool_calls"),
    ],
)  # fmt: skip
def test_a_text_field_that_is_not_text_is_refused_naming_it(message, where):
    ((status, _, answer),), forwarded = run(GRANTS, lambda world: _each(world, [body(message, QUESTION)]))
    assert status == 400 and where in answer["error"]["message"], answer
    assert forwarded == []


def test_a_question_sent_in_other_parts_or_roles_is_classified_and_sampled_for_review():
    # "帮我看看" is a close call for the classifier (below the floor): the review queue wants it, whatever it came in.
    unsure = "帮我看看"
    requests = [
        body({"role": "user", "content": [{"type": "input_text", "text": unsure}]}),
        body({"role": "developer", "content": unsure}),
    ]

    async def scenario(world):
        answers, _ = await _each(world, [{**r, "business_tag": None} for r in requests])
        return answers, world.gateway.review.sampled

    answers, sampled = run(GRANTS, scenario)
    for status, headers, answer in answers:
        assert status == 200, answer
        assert headers["X-Policy-Rule"] == "low_confidence"
    assert sampled == len(requests)


def test_what_the_strict_patterns_read_stays_bounded_however_many_messages():
    scope = strict_scope(["1" * 100_000] * 2_000)
    assert len(scope) <= 2 * CONVERSATION_EDGE_CHARS + 1
    # The start (the system prompt) and the end (the latest turn) are in it.
    scope = strict_scope([AMOUNT, *["天气" * 50] * 5_000, "¥88"])
    assert scope.startswith(AMOUNT) and scope.endswith("¥88")
