"""A client's own words cannot lift the max_tokens cap. The seed's whitelist exempts special scenarios (legal clause
questions) from the first-turn cap; the classifier reads a message's first and last 48 characters, so one legal-sounding
sentence added to any request used to be read as `legal_policy` and lift its max_tokens to the client's value. Now an
intent on a whitelist lifts the cap only for a key granted that intent as a business tag: the classifier stands in for
a tag the key could have sent, never for one it could not. Against the real gateway and the shipped intent model in
this process (tests/security/gateway_world.py); every attack message is first shown to be read as `legal_policy`.
"""

import pytest

from tests.security.gateway_world import CAP, run

GRANTS = {"shop": ["order_status"], "legal-desk": ["legal_policy"], "tagger": ["legal"]}
ASK = 2000
ATTACKS = {
    "en-suffix": "Write me a 3000-word story about dragons. Which clause of your terms of service covers this?",
    "zh-suffix": "推荐几款手机。根据消费者权益保护法，七天无理由退货的法律条款是怎么规定的？",
    "en-prefix-and-suffix": (
        "What does your privacy policy say? Recommend me ten laptops and describe each in detail, with specs, "
        "prices and reviews. What does your privacy policy say about data sharing?"
    ),
    "pure-legal": "你们的隐私政策里关于个人信息共享的条款是什么",
}


def chat(text: str, **extra) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": ASK, **extra}


async def _each(world, key, bodies, path="/v1/chat/completions", headers=None):
    return [await world.post(path, body, key=key, headers=headers) for body in bodies]


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_legal_sounding_sentence_lifts_nothing_for_a_key_not_granted_it(name):
    bodies = [chat(ATTACKS[name]), chat(ATTACKS[name], stream=False, max_completion_tokens=ASK)]

    async def scenario(world):
        return await _each(world, "shop", bodies), list(world.engine.bodies)

    answers, forwarded = run(GRANTS, scenario)
    for status, headers, answer in answers:
        assert status == 200, answer
        assert headers["X-Policy-Intent"].startswith("legal_policy;"), headers  # the classifier did read it as legal
        assert headers["X-Policy-Max-Tokens"] == str(CAP)
    assert [body["max_tokens"] for _, body in forwarded] == [CAP, CAP]
    assert all("max_completion_tokens" not in body for _, body in forwarded)


def test_the_legal_sentence_hidden_in_other_messages_or_a_completion_lifts_nothing():
    legal = ATTACKS["en-suffix"]
    bodies = [
        {"model": "m", "max_tokens": ASK, "messages": [{"role": "system", "content": legal},
                                                       {"role": "user", "content": "Tell me a long story"}]},
        {"model": "m", "max_tokens": ASK, "messages": [{"role": "user", "content": "Tell me a long story"},
                                                       {"role": "user", "content": legal}]},
        {"model": "m", "max_tokens": ASK, "messages": [{"role": "developer", "content": legal}]},
        {"model": "m", "max_tokens": ASK, "messages": [{"role": "user", "content": [
            {"type": "input_text", "text": "Tell me a long story. "}, {"type": "text", "text": legal}]}]},
    ]  # fmt: skip

    async def scenario(world):
        chats = await _each(world, "shop", bodies)
        completions = await _each(
            world, "shop", [{"model": "m", "prompt": legal, "max_tokens": ASK}], "/v1/completions"
        )
        return chats + completions, list(world.engine.bodies)

    answers, forwarded = run(GRANTS, scenario)
    assert [status for status, _, _ in answers] == [200] * 5, answers
    assert [body["max_tokens"] for _, body in forwarded] == [CAP] * 5


def test_a_key_granted_the_intent_keeps_its_longer_replies_up_to_the_ceiling():
    legal = ATTACKS["pure-legal"]

    async def scenario(world):
        granted = await _each(world, "legal-desk", [chat(legal), chat(legal, max_tokens=100000)])
        # Granted the tag `legal` (on the whitelist too) but not the intent: the tag lifts when sent, the
        # classifier's reading alone does not.
        tag_holder = await _each(world, "tagger", [chat(legal)])
        tagged = await _each(world, "tagger", [chat(legal)], headers={"X-Business-Tag": "legal"})
        return granted + tag_holder + tagged

    answers = run(GRANTS, scenario)
    assert [headers["X-Policy-Max-Tokens"] for _, headers, _ in answers] == [str(ASK), "2048", str(CAP), str(ASK)]


def test_explain_says_why_an_ungranted_intent_lifted_nothing():
    async def scenario(world):
        body = {"message": ATTACKS["en-suffix"], "max_tokens": ASK}
        return await world.post("/v1/policy/explain", body, key="shop"), await world.post(
            "/v1/policy/explain", body, key="legal-desk"
        )

    (status, _, ungranted), (_, _, granted) = run(GRANTS, scenario)
    assert status == 200
    decision = ungranted["decision"]
    assert (decision["intent"], decision["max_tokens"], decision["whitelist"]) == ("legal_policy", CAP, None)
    assert any("only for a key granted it" in note for note in decision["notes"])
    assert (granted["decision"]["max_tokens"], granted["decision"]["whitelist"]) == (ASK, "legal")
