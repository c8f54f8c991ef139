"""`POST /v1/completions` is no way around the request policy: a raw prompt gets the tiers, the max_tokens cap and the
key's tag grant exactly as a chat message does. Against a real agent on the simulator."""

import json
import urllib.error
import urllib.request

import pytest

from tests.engine_node.fleet import TEST_KEY_TAGS
from tests.engine_node.test_gateway_policy import start_node

pytestmark = pytest.mark.agents

CAP = 16


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    agent = start_node(tmp_path_factory, "completions-node", params={"max_tokens": {"default": CAP}})
    yield agent
    agent.stop()


def complete(node, body: dict, headers: dict | None = None) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        f"{node.url}/v1/completions", data=json.dumps(body).encode(), headers={**node.headers, **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def test_a_raw_prompt_gets_the_first_turn_cap_whatever_max_tokens_it_asks(node):
    # ignore_eos: the simulator generates until max_tokens, so the tokens it produced are the max_tokens it was sent.
    body = {"model": node.model, "prompt": "Tell me everything about my order", "max_tokens": 2000, "ignore_eos": True}
    status, headers, answer = complete(node, body)
    assert status == 200, answer
    assert headers["X-Policy-Max-Tokens"] == str(CAP)
    assert answer["usage"]["completion_tokens"] == CAP


def test_token_id_prompts_are_capped_too(node):
    body = {"model": node.model, "prompt": [101, 2023, 2003], "max_tokens": 2000, "ignore_eos": True}
    status, _, answer = complete(node, body)
    assert status == 200, answer
    assert answer["usage"]["completion_tokens"] == CAP


def test_a_whitelisted_tag_outside_the_keys_grant_lifts_nothing(node):
    assert "legal_policy" not in TEST_KEY_TAGS  # whitelisted in the node's bundle, not granted to the test key
    body = {"model": node.model, "prompt": "第十二条怎么解释", "max_tokens": 2000, "ignore_eos": True}
    status, headers, answer = complete(node, body, {"X-Business-Tag": "legal_policy"})
    assert status == 200, answer
    assert headers["X-Business-Tag-Ignored"] == "legal_policy"
    assert answer["usage"]["completion_tokens"] == CAP


def test_a_payment_amount_in_the_prompt_gets_the_strict_tier(node):
    body = {"model": node.model, "prompt": "我付了 ¥299.00 但是订单显示未支付", "max_tokens": 8}
    status, headers, _ = complete(node, body)
    assert status == 200
    assert (headers["X-Policy-Tier"], headers["X-Policy-Temperature"]) == ("strict", "0.3")


@pytest.mark.parametrize(
    "body, param",
    [
        ({"prompt": {"text": "hi"}}, "prompt"),
        ({"prompt": ["one", "two"]}, "prompt"),
        ({"prompt": "hi", "n": 3}, "n"),
        # Token-id prompts used to skip the generation-count check: n sequences under one admission slot.
        ({"prompt": [101, 2023, 2003], "n": 3}, "n"),
        ({"prompt": [101, 2023, 2003], "use_beam_search": True}, "use_beam_search"),
        ({"prompt": [[101, 2023]], "best_of": 4}, "best_of"),
        ({"prompt": "hi", "max_tokens": -1}, "max_tokens"),
    ],
)
def test_malformed_completion_bodies_get_a_400_naming_the_field(node, body, param):
    status, _, answer = complete(node, {"model": node.model, **body})
    assert status == 400
    assert answer["error"]["param"] == param
