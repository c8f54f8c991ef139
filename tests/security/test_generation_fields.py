"""One admitted request is one generation: fields that make vLLM generate several sequences (`n`, `best_of`, beam
search) or score every prompt token (`prompt_logprobs`, `echo`) would multiply the max_tokens cap while admission
counts one slot. The gateway refuses them with a 400 naming the field, on chat and completions alike, whatever the
prompt's form, before the engine sees anything. Against the real gateway in this process
(tests/security/gateway_world.py).
"""

import pytest

from tests.security.gateway_world import run

GRANTS = {"shop": []}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "我的订单到哪了"}], "max_tokens": 2000}
TOKEN_IDS = {"model": "m", "prompt": [101, 2023, 2003], "max_tokens": 2000}
TEXT_PROMPT = {"model": "m", "prompt": "Tell me everything about my order", "max_tokens": 2000}

MULTIPLIERS = [
    ({"n": 4}, "n"),
    ({"n": 4, "stream": True}, "n"),
    ({"n": 2, "temperature": 0.5}, "n"),
    ({"n": 0}, "n"),
    ({"n": -3}, "n"),
    ({"n": 4.0}, "n"),
    ({"n": "4"}, "n"),
    ({"n": True}, "n"),  # JSON true is 1 to a lax integer parser; it is no generation count
    ({"best_of": 5}, "best_of"),
    ({"best_of": 5, "n": 1}, "best_of"),
    ({"use_beam_search": True}, "use_beam_search"),
    ({"use_beam_search": True, "n": 1, "length_penalty": 2.0}, "use_beam_search"),
    ({"use_beam_search": "true"}, "use_beam_search"),
    ({"use_beam_search": 1}, "use_beam_search"),
    ({"echo": True, "logprobs": True, "top_logprobs": 5}, "echo"),
    ({"prompt_logprobs": 20}, "prompt_logprobs"),
    ({"prompt_logprobs": 0}, "prompt_logprobs"),  # 0 still has the engine score every prompt token
    ({"logprob_token_ids": list(range(1000)), "logprobs": True}, "logprob_token_ids"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),  # -1: the whole vocabulary at every token
    ({"logprobs": True, "top_logprobs": 100000}, "top_logprobs"),
]


async def _send_each(world, path, base, cases):
    answers = []
    for extra, _ in cases:
        answers.append(await world.post(path, {**base, **extra}, key="shop"))
    return answers, list(world.engine.bodies)


def _assert_refused_naming(answers, cases, bodies):
    for (status, _, answer), (extra, field) in zip(answers, cases, strict=True):
        assert status == 400, (extra, answer)
        assert answer["error"]["param"] == field, (extra, answer)
        assert answer["error"]["type"] == "BadRequestError" and answer["error"]["code"] == 400
        assert field in answer["error"]["message"]
    assert bodies == [], "a refused request reached the engine"


@pytest.mark.parametrize("base", [CHAT], ids=["chat"])
def test_chat_requests_for_several_generations_are_refused_naming_the_field(base):
    answers, bodies = run(GRANTS, lambda world: _send_each(world, "/v1/chat/completions", base, MULTIPLIERS))
    _assert_refused_naming(answers, MULTIPLIERS, bodies)


@pytest.mark.parametrize("base", [TOKEN_IDS, TEXT_PROMPT, {**TOKEN_IDS, "prompt": [[101, 2023]]}],
                         ids=["token-ids", "text", "batch-of-one-token-ids"])  # fmt: skip
def test_completion_requests_for_several_generations_are_refused_whatever_the_prompt(base):
    cases = [*MULTIPLIERS, ({"prompt_embeds": ["AAAA", "AAAA"]}, "prompt_embeds")]
    answers, bodies = run(GRANTS, lambda world: _send_each(world, "/v1/completions", base, cases))
    _assert_refused_naming(answers, cases, bodies)


def test_one_generation_asked_for_explicitly_still_passes_capped():
    async def scenario(world):
        chat = await world.post(
            "/v1/chat/completions",
            {**CHAT, "n": 1, "use_beam_search": False, "echo": False, "logprobs": True, "top_logprobs": 5},
            key="shop",
        )
        completion = await world.post("/v1/completions", {**TOKEN_IDS, "n": 1, "best_of": 1}, key="shop")
        return chat, completion, list(world.engine.bodies)

    chat, completion, bodies = run(GRANTS, scenario)
    assert chat[0] == 200 and completion[0] == 200, (chat, completion)
    assert [route for route, _ in bodies] == ["chat", "completions"]
    for _, body in bodies:
        assert body.get("n", 1) == 1 and not body.get("use_beam_search") and body.get("best_of", 1) == 1
        assert body["max_tokens"] == 64  # the first-turn cap, not the client's 2000
    assert bodies[0][1]["top_logprobs"] == 5


def test_the_error_does_not_echo_a_large_value():
    async def scenario(world):
        return await world.post("/v1/completions", {**TEXT_PROMPT, "best_of": [7] * 10000}, key="shop")

    status, _, answer = run(GRANTS, scenario)
    assert status == 400 and answer["error"]["param"] == "best_of"
    assert len(answer["error"]["message"]) < 200
