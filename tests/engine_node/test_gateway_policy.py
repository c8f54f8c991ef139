"""The gateway's request policy end to end: the official openai client against an agent serving the simulator.

Each node starts from a config and policy bundle on its disk (the files the agent writes when the control plane
pushes them), so these tests need no control plane; test_fleet_policy.py covers the push itself.
"""

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from controlplane.params import schema
from engine_node.config import content_hash
from tests.engine_node.fleet import AgentProcess

pytestmark = pytest.mark.agents

# Replies of 40-90 tokens: longer than the 16-token cap below, so first turns are cut mid-sentence.
LONG_REPLIES = """
latency:
  time_scale: 0.02
reply_length:
  median: 60
  sigma: 0.3
  min: 40
  max: 90
"""
BUNDLE = {
    "pool": "test",
    "whitelists": {"legal": ["legal_policy", "legal"]},
    "overrides": [],
    "degradation": {"active": False, "reason": "", "since": None},
    "intent_model": None,
}


def write_state(state_dir, *, params=None, bundle=None):
    content = schema.defaults()
    for section, values in (params or {}).items():
        content[section].update(values)
    digest = content_hash(content)
    message = {"version": {"template": "test", "number": 1, "hash": digest}, "hash": digest, "content": content}
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "last_good_config.json").write_text(json.dumps(message), encoding="utf-8")
    bundle = {**BUNDLE, **(bundle or {})}
    (state_dir / "policy_bundle.json").write_text(
        json.dumps({"hash": content_hash(bundle), "content": bundle}), encoding="utf-8"
    )


def start_node(tmp_path_factory, name, *, params=None, bundle=None, queue_timeout_s=10, profile=LONG_REPLIES):
    work = tmp_path_factory.mktemp(name)
    profile_path = work / "profile.yaml"
    profile_path.write_text(profile, encoding="utf-8")
    write_state(work / name, params=params, bundle=bundle)
    node = AgentProcess(
        name=name, control_plane_url=None, work=work, profile=profile_path, queue_timeout_s=queue_timeout_s
    )
    node.start()
    return node


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    now = time.time()
    overrides = [
        {"conversation": "vip-7", "tier": "creative", "temperature": None, "reason": "VIP complaint handled",
         "set_by": "amy", "expires_at": now + 3600},
    ]  # fmt: skip
    agent = start_node(
        tmp_path_factory, "policy-node", params={"max_tokens": {"default": 16}}, bundle={"overrides": overrides}
    )
    yield agent
    agent.stop()


@pytest.fixture(scope="module")
def client(node):
    return node.openai_client()


def ask(client, text, **kwargs):
    raw = client.chat.completions.with_raw_response.create(
        model="simulated-chat-model", messages=[{"role": "user", "content": text}], **kwargs
    )
    return raw.headers, raw.parse()


def test_the_openai_client_works_without_and_with_streaming(client):
    _, reply = ask(client, "我的订单到哪了？")
    assert reply.choices[0].message.content
    assert reply.usage.completion_tokens > 0
    stream = client.chat.completions.create(
        model="simulated-chat-model",
        messages=[{"role": "user", "content": "what's your return policy?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    usage = [c.usage for c in chunks if c.usage]
    assert len(usage) == 1 and usage[0].completion_tokens > 0
    # The session summary closes the stream (docs/stream-sessions.md).
    assert chunks[-1].model_extra["x_final"] is True and chunks[-1].model_extra["x_seq"] == len(chunks)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert client.models.list().data[0].id == "simulated-chat-model"


@pytest.mark.parametrize(
    ("text", "tier", "temperature"),
    [
        ("我付了¥299.00怎么还显示未支付", "strict", "0.3"),
        ("my order number 20241111887766 hasn't shipped", "strict", "0.3"),
        ("手机号13812345678收不到验证码", "strict", "0.3"),
        ("有什么适合送女朋友的生日礼物推荐吗", "creative", "0.9"),
        ("Can you recommend a good laptop for a student?", "creative", "0.9"),
        ("asdf qwer zxcv", "normal", "0.7"),
    ],
)
def test_each_message_gets_its_tier_temperature(client, text, tier, temperature):
    headers, _ = ask(client, text, temperature=1.5)
    assert (headers["X-Policy-Tier"], headers["X-Policy-Temperature"]) == (tier, temperature)


def test_a_business_tag_in_a_header_or_the_body_overrides_the_classifier(client):
    headers, _ = ask(client, "随便聊聊", extra_headers={"X-Business-Tag": "copywriting"})
    assert (headers["X-Policy-Tier"], headers["X-Policy-Rule"]) == ("creative", "business_tag")
    headers, _ = ask(client, "随便聊聊", extra_body={"business_tag": "order_status"})
    assert headers["X-Policy-Tier"] == "strict"


def test_a_manual_override_wins_for_its_conversation(client):
    headers, _ = ask(client, "我付了¥299.00怎么还显示未支付", extra_headers={"X-Conversation-Id": "vip-7"})
    assert (headers["X-Policy-Tier"], headers["X-Policy-Rule"]) == ("creative", "override")
    headers, _ = ask(client, "我付了¥299.00怎么还显示未支付", extra_headers={"X-Conversation-Id": "someone-else"})
    assert headers["X-Policy-Rule"] == "regex"


def test_a_whitelisted_legal_request_keeps_its_longer_max_tokens(client):
    # The test key is granted the tag `legal` (on the whitelist), not the intent `legal_policy`: the classifier's
    # reading alone lifts nothing, the granted tag does.
    legal_question = "你们的隐私政策里关于个人信息共享的条款是什么"
    headers, _ = ask(client, legal_question, max_tokens=200)
    assert headers["X-Policy-Max-Tokens"] == "16"
    headers, reply = ask(client, legal_question, max_tokens=200, extra_headers={"X-Business-Tag": "legal"})
    assert headers["X-Policy-Max-Tokens"] == "200"
    assert reply.choices[0].finish_reason == "stop"  # 40-90 tokens fit in 200: nothing was cut
    headers, _ = ask(client, "退货怎么退", max_tokens=200)
    assert headers["X-Policy-Max-Tokens"] == "16"


def test_a_reply_cut_mid_sentence_by_the_cap_is_continued_in_one_answer(client):
    headers, reply = ask(client, "退货怎么退", max_tokens=500, seed=7)
    assert int(headers["X-Continuation-Rounds"]) >= 1
    assert reply.usage.completion_tokens > 16
    stream = client.chat.completions.create(
        model="simulated-chat-model",
        messages=[{"role": "user", "content": "退货怎么退"}],
        max_tokens=500,
        stream=True,
        seed=7,
    )
    chunks = list(stream)
    assert len({c.id for c in chunks}) == 1
    roles = [c for c in chunks if c.choices and c.choices[0].delta.role]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(roles) == 1 and len(finishes) == 1
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # Same request, same seed, same reply: the continued stream and the continued plain answer agree.
    assert streamed == reply.choices[0].message.content


def _post(node, path, body: bytes, headers=None):
    request = urllib.request.Request(f"{node.url}{path}", data=body, headers={**node.headers, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers


@pytest.mark.parametrize(
    ("body", "status", "param", "words"),
    [
        (b'{"messages": [', 400, None, "not valid JSON"),
        (b'{"messages": [{"role": "boss", "content": "hi"}]}', 400, "messages", "'boss' is not one of"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": 3}', 400, "temperature", "between 0"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}', 400, "max_tokens", "positive"),
        (b'{"messages": []}', 400, "messages", "non-empty"),
        (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, None, "UTF-8"),
        (b"[1, 2]", 400, None, "JSON object"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "business_tag": "bad tag!"}', 400, "business_tag", ""),
        (b'{"messages": [{"role": "user", "content": "' + b"x" * (9 << 20) + b'"}]}', 413, None, "limit is 8388608"),
    ],
)
def test_bad_input_gets_vllms_error_shape_never_a_500(node, body, status, param, words):
    code, reply, _ = _post(node, "/v1/chat/completions", body)
    assert code == status
    error = reply["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status and error["param"] == param
    assert words in error["message"]


def test_explain_shows_each_value_and_the_rule_that_decided_it(node):
    code, reply, _ = _post(
        node, "/v1/policy/explain", json.dumps({"message": "订单号 DD20241111887766 什么时候到"}).encode()
    )
    assert code == 200
    decision = reply["decision"]
    assert decision["intent"] == "order_status" and decision["confidence"] >= 0.8
    assert (decision["tier"], decision["tier_rule"], decision["temperature"]) == ("strict", "regex", 0.3)
    assert decision["regex_hits"] and "DD20241111887766" in decision["regex_hits"][0]["match"]
    assert (decision["max_tokens"], decision["max_tokens_rule"]) == (16, "first-turn cap")
    assert decision["queue"] == "short"
    assert reply["template"] == "test v1"
    code, reply, _ = _post(node, "/v1/policy/explain", b'{"message": ""}')
    assert code == 400 and reply["error"]["param"] == "message"


def test_degradation_wins_over_the_override(tmp_path_factory):
    bundle = {
        "overrides": [{"conversation": "vip-7", "tier": "creative", "temperature": None, "reason": "VIP",
                       "set_by": "amy", "expires_at": time.time() + 3600}],
        "degradation": {"active": True, "reason": "load 0.93 for 30 s", "since": time.time()},
    }  # fmt: skip
    degraded = start_node(tmp_path_factory, "degraded-node", bundle=bundle)
    try:
        client = degraded.openai_client()
        headers, reply = ask(client, "有什么推荐", max_tokens=1000, extra_headers={"X-Conversation-Id": "vip-7"})
        assert (headers["X-Policy-Rule"], headers["X-Policy-Temperature"]) == ("degradation", "0.7")
        assert headers["X-Policy-Max-Tokens"] == "128"
        assert reply.usage.completion_tokens <= 128
    finally:
        degraded.stop()


def test_a_burst_beyond_the_queue_gets_429_with_retry_after_while_admitted_requests_complete(tmp_path_factory):
    # Two sequences at a time on the engine, so the gateway has at most two in flight and queues the rest.
    params = {
        "batch": {"max_size": 1, "min_size": 1, "max_queue": 2},
        "max_tokens": {"default": 64},
        "engine": {"max_num_seqs": 2},
    }
    small = start_node(tmp_path_factory, "small-queue-node", params=params)
    body = json.dumps({"model": "simulated-chat-model", "messages": [{"role": "user", "content": "hello"}]}).encode()
    try:
        with ThreadPoolExecutor(max_workers=24) as pool:
            results = list(pool.map(lambda _: _post(small, "/v1/chat/completions", body), range(24)))
    finally:
        small.stop()
    statuses = [status for status, _, _ in results]
    assert set(statuses) <= {200, 429, 503}
    assert statuses.count(429) >= 1 and statuses.count(200) >= 4
    for status, reply, headers in results:
        if status == 200:
            assert reply["choices"][0]["message"]["content"]
        else:
            assert int(headers["Retry-After"]) >= 1 and reply["error"]["code"] == status
