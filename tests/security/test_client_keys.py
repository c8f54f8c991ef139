"""Gateway clients authenticate with their pool's client keys, and a key's business tags are all it can lift.

Nothing faked: the control plane (daphne on Postgres) issues and revokes keys, the policy bundle carries their
hashes to a real agent on the simulator, and requests go over HTTP (urllib, and the official `openai` client).
The agent has no key file, so every key it accepts came from the control plane.

Attacks these hold off: calling any /v1 route without a key, with a made-up one or with a revoked one (the
revocation reaching the node within seconds); sending `X-Business-Tag: legal` (or a tier name) to lift max_tokens or
the temperature tier without being granted the tag; resuming someone else's stream; scraping /metrics once the pool
has a scrape key.
"""

import http.client
import json
import urllib.error
import urllib.request

import openai
import pytest

from controlplane.nodes.models import ClientKey, EngineNode
from controlplane.nodes.services.client_keys import client_key_revoke
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from controlplane.params.services.whitelists import whitelist_create
from tests.engine_node.conftest import metric_value
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, provision_client_key, wait_until
from tests.live_server import Daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

MODEL = "simulated-chat-model"
# The revocation must reach the node within seconds (issue: "revocation takes effect within seconds").
REVOCATION_BOUND_S = 30.0  # a wait, not a measurement: revocation reaches a node with its next bundle push


@pytest.fixture
def fleet(tmp_path, sre):
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    server = Daphne(tmp_path)
    server.start()
    pool = pool_create(actor=sre, name="staging", is_production=False)
    whitelist_create(actor=sre, name="legal", scenarios=["legal"])
    template = template_create(actor=sre, name="chat")
    version = template_version_create(actor=sre, template=template, document={"inference_params": {}}, base_number=None)
    pool_publish(actor=sre, pool=pool, version=version, reason="first")
    engine_node, token = node_create(actor=sre, name="gpu-1", pool=pool)
    agent = AgentProcess(
        name="gpu-1",
        token=token,
        control_plane_url=server.ws_agent_url,
        work=tmp_path,
        profile=profile,
        client_key=None,
    )
    try:
        agent.start()
        wait_until(lambda: EngineNode.objects.get(pk=engine_node.pk).applied_hash == version.content_hash, 30, "ACK")
        wait_until(lambda: agent.health()["status"] == "online", 30, "the gate to open")
        yield {"pool": pool, "agent": agent}
    finally:
        agent.stop()
        server.stop()


def call(agent: AgentProcess, method: str, path: str, body=None, key: str | None = None, headers=None):
    """(status, JSON body, headers) of one request; `key` goes in Authorization: Bearer."""
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    if key is not None:
        sent["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{agent.url}{path}", data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw, status, got = response.read(), response.status, response.headers
    except urllib.error.HTTPError as exc:
        raw, status, got = exc.read(), exc.code, exc.headers
    try:
        return status, json.loads(raw), got
    except ValueError:
        return status, raw.decode(), got


def chat_body(text: str = "我的订单到哪了？", **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


def start_stream(agent: AgentProcess, key: str) -> str:
    """Start a streamed chat with `key`, read it to the end, return its session id."""
    connection = http.client.HTTPConnection("127.0.0.1", agent.port, timeout=30)
    body = json.dumps(chat_body(stream=True, max_tokens=16))
    connection.request(
        "POST", "/v1/chat/completions", body, {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    )
    response = connection.getresponse()
    assert response.status == 200
    session_id = response.headers["X-Session-Id"]
    response.read()
    connection.close()
    return session_id


def routes(session_id: str) -> list[tuple[str, str, dict | None]]:
    return [
        ("POST", "/v1/chat/completions", chat_body(max_tokens=8)),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "hello", "max_tokens": 8}),
        ("GET", "/v1/models", None),
        ("POST", "/v1/policy/explain", {"message": "我的订单到哪了？"}),
        ("GET", f"/v1/sessions/{session_id}/stream?after=0", None),
    ]


def assert_refused_401(agent, key, session_id) -> None:
    for method, path, body in routes(session_id):
        status, reply, headers = call(agent, method, path, body, key=key)
        assert status == 401, (path, reply)
        assert set(reply["error"]) == {"message", "type", "param", "code"} and reply["error"]["code"] == 401
        assert reply["error"]["type"] == "AuthenticationError"
        assert headers["WWW-Authenticate"].startswith("Bearer")


def test_no_wrong_or_revoked_key_gets_401_on_every_route_and_a_revocation_lands_within_seconds(fleet, sre):
    agent, pool = fleet["agent"], fleet["pool"]
    # A node that never got a key (no bundle key, no key file) serves no one.
    status, reply, _ = call(agent, "GET", "/v1/models")
    assert status == 401 and "no client keys yet" in reply["error"]["message"]

    key = provision_client_key(sre, [pool], name="web-chat", business_tags=["order"])
    other = provision_client_key(sre, [pool], name="call-center")
    wait_until(lambda: call(agent, "GET", "/v1/models", key=key)[0] == 200, 10, "the key to reach the node")
    session_id = start_stream(agent, key)
    for method, path, body in routes(session_id):
        status, reply, _ = call(agent, method, path, body, key=key)
        assert status == 200, (path, reply)

    assert_refused_401(agent, None, session_id)
    assert_refused_401(agent, "cpk_" + "x" * 43, session_id)
    assert_refused_401(agent, key[:-1] + ("A" if key[-1] != "A" else "B"), session_id)  # right prefix, wrong key
    status, _, _ = call(agent, "GET", "/v1/models", headers={"Authorization": f"Basic {key}"})
    assert status == 401

    # Another valid key of the pool cannot resume this stream: it does not exist for that key.
    status, reply, _ = call(agent, "GET", f"/v1/sessions/{session_id}/stream?after=0", key=other)
    assert status == 404 and reply["error"]["type"] == "NotFoundError"

    # The official client with the key; and with a wrong one, its AuthenticationError.
    client = openai.OpenAI(base_url=f"{agent.url}/v1", api_key=key, max_retries=0, timeout=30)
    assert client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}]).choices
    streamed = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert client.models.list().data[0].id == MODEL
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{agent.url}/v1", api_key="cpk_guessed", max_retries=0).models.list()

    client_key_revoke(actor=sre, client_key=ClientKey.objects.get(name="web-chat"), reason="leaked in a screenshot")
    wait_until(lambda: call(agent, "GET", "/v1/models", key=key)[0] == 401, REVOCATION_BOUND_S, "the revocation")
    assert_refused_401(agent, key, session_id)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()
    assert call(agent, "GET", "/v1/models", key=other)[0] == 200  # the pool's other key is untouched


def test_tags_outside_the_grant_lift_nothing_and_are_counted_and_a_scrape_key_closes_metrics(fleet, sre):
    agent, pool = fleet["agent"], fleet["pool"]
    orders = provision_client_key(sre, [pool], name="orders", business_tags=["order"])
    legal_desk = provision_client_key(sre, [pool], name="legal-desk", business_tags=["legal", "creative"])
    wait_until(lambda: call(agent, "GET", "/v1/models", key=legal_desk)[0] == 200, 10, "the keys")

    def ignored_count() -> float:
        text = urllib.request.urlopen(f"{agent.url}/metrics", timeout=10).read().decode()
        return metric_value(text, 'engine_node_gateway_business_tags_ignored_total{key="orders"}') or 0.0

    # Granted: the whitelist keeps the client's 1500 tokens, the tier tag sets the tier.
    status, _, headers = call(agent, "POST", "/v1/chat/completions", chat_body("第十二条怎么解释", max_tokens=1500),
                              key=legal_desk, headers={"X-Business-Tag": "legal"})  # fmt: skip
    assert status == 200 and headers["X-Policy-Max-Tokens"] == "1500"
    status, _, headers = call(agent, "POST", "/v1/chat/completions", chat_body("asdf qwer zxcv"),
                              key=legal_desk, headers={"X-Business-Tag": "creative"})  # fmt: skip
    assert (headers["X-Policy-Tier"], headers["X-Policy-Rule"]) == ("creative", "business_tag")

    # Not granted: served exactly as the untagged request is, and counted.
    before = ignored_count()
    untagged = call(agent, "POST", "/v1/chat/completions", chat_body("第十二条怎么解释", max_tokens=1500), key=orders)
    for tag, in_body in (("legal", False), ("legal", True), ("creative", False), ("strict", True)):
        body = chat_body("第十二条怎么解释", max_tokens=1500, **({"business_tag": tag} if in_body else {}))
        status, reply, headers = call(agent, "POST", "/v1/chat/completions", body, key=orders,
                                      headers={} if in_body else {"X-Business-Tag": tag})  # fmt: skip
        assert status == 200, reply
        for name in ("X-Policy-Max-Tokens", "X-Policy-Tier", "X-Policy-Rule", "X-Policy-Temperature"):
            assert headers[name] == untagged[2][name], (tag, name)
        assert headers["X-Policy-Max-Tokens"] == "256" and headers["X-Business-Tag-Ignored"] == tag
        assert reply["usage"]["completion_tokens"] <= 256
    assert ignored_count() - before == 4
    # The counter is labelled by key, never by what the client sent.
    exposition = urllib.request.urlopen(f"{agent.url}/metrics", timeout=10).read().decode()
    assert 'engine_node_gateway_business_tags_ignored_total{key="orders"}' in exposition
    assert "legal" not in "".join(line for line in exposition.splitlines() if "business_tags_ignored" in line)
    # explain answers for the key too: the tag is noted and ignored.
    question = {"message": "第十二条怎么解释", "business_tag": "legal", "max_tokens": 1500}
    status, reply, _ = call(agent, "POST", "/v1/policy/explain", question, key=orders)
    assert status == 200 and reply["decision"]["max_tokens"] == 256
    assert any("not granted to this key" in note for note in reply["decision"]["notes"])

    # /metrics is open until the pool has a scrape key; then only that key reads it.
    scrape = provision_client_key(sre, [pool], name="prometheus", kind="scrape")
    wait_until(lambda: call(agent, "GET", "/metrics")[0] == 401, REVOCATION_BOUND_S, "/metrics to close")
    status, reply, _ = call(agent, "GET", "/metrics", key=orders)
    assert status == 401 and "scrape key" in reply["error"]["message"]
    status, text, _ = call(agent, "GET", "/metrics", key=scrape)
    assert status == 200 and "engine_node_gateway_requests_total" in text
    assert call(agent, "GET", "/v1/models", key=scrape)[0] == 401  # a scrape key calls no /v1 route
    assert call(agent, "GET", "/healthz")[0] == 200  # load balancers need no key
