"""The gateway forwards only its own routes: no request target reaches the engine's dev endpoints.

The agent runs vLLM with VLLM_SERVER_DEV_MODE=1 (it calls /reset_prefix_cache and /collective_rpc itself), so
`POST /v1/../sleep` once put a live engine to sleep through the gateway. Here a real agent on the simulator (which
serves the same dev endpoints) gets every traversal spelling we could think of, with and without a valid client key:
each is refused with a 4xx, and afterwards the engine is awake and a chat still answers.
"""

import json
import socket
import urllib.error
import urllib.request

import pytest

from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, wait_until
from tests.engine_node.test_gateway_policy import write_state
from tests.live_server import free_port

pytestmark = pytest.mark.agents

DEV_ENDPOINTS = ["sleep", "collective_rpc", "reset_prefix_cache", "wake_up", "sim/faults"]
TRAVERSALS = [
    "/v1/../sleep",
    "/v1/./../sleep",
    "/v1/%2e%2e/collective_rpc",
    "/v1/%2E%2E/collective_rpc",
    "/v1/%2e%2E/sleep",
    "/v1/..%2fsleep",
    "/v1/..%2Fsleep",
    "/v1/%2e%2e%2fsleep",
    "/v1/.%2e/sleep",
    "/v1/%252e%252e/sleep",
    "/v1/..%5csleep",
    "/v1/..\\sleep",
    "/v1/chat/../../sleep",
    "/v1/chat/completions/..",
    "/v1//../sleep",
    "//sleep",
    "/v1/chat%2fcompletions",
    "/v1/chat/completions%00",
    "/v1/./chat/completions",
    "/v1/chat/completions#/../../sleep",
    "/v1/models/..",
    "/v1/sessions/../../sleep/stream",
]
# Targets the gateway never forwards, however well-formed: the engine's own routes outside the list.
NOT_SERVED = [
    ("POST", "/sleep"),
    ("POST", "/collective_rpc"),
    ("POST", "/reset_prefix_cache"),
    ("GET", "/is_sleeping"),
    ("POST", "/sim/faults"),
    ("POST", "/v1/load_lora_adapter"),
    ("POST", "/v1/responses"),
    ("POST", "/v1/embeddings"),
    ("GET", "/v1/chat/completions"),
]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    work = tmp_path_factory.mktemp("paths")
    profile = work / "profile.yaml"
    profile.write_text(FAST_PROFILE, encoding="utf-8")
    write_state(work / "path-node")
    engine_port = free_port()
    agent = AgentProcess(
        name="path-node",
        control_plane_url=None,
        work=work,
        backend_args=["--backend", "simulator", "--simulator-profile", str(profile), "--engine-port", str(engine_port)],
    )
    agent.engine_url = f"http://127.0.0.1:{engine_port}"
    agent.start()
    wait_until(lambda: agent.health()["status"] == "online", 30, "the node to serve")
    yield agent
    agent.stop()


def raw_request(node: AgentProcess, method: str, target: bytes, headers: dict | None = None) -> tuple[int, bytes]:
    """One request with the target exactly as given (no client-side normalisation), over a plain socket."""
    lines = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1", b"Content-Length: 2"]
    lines += [f"{name}: {value}".encode() for name, value in (headers or {}).items()]
    lines += [b"Connection: close", b"", b"{}"]
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        sock.sendall(b"\r\n".join(lines))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def engine_asleep(node: AgentProcess) -> bool:
    with urllib.request.urlopen(f"{node.engine_url}/is_sleeping", timeout=5) as response:
        return json.loads(response.read())["is_sleeping"]


def assert_engine_serving(node: AgentProcess) -> None:
    assert engine_asleep(node) is False
    status, body = node.chat()
    assert status == 200 and body["choices"][0]["message"]["content"]


def assert_openai_error(status: int, body: bytes, expected: int) -> dict:
    assert status == expected, body[:300]
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == expected
    return error


def test_the_simulator_really_serves_the_dev_endpoints_the_gateway_must_hide(node):
    """The attack's precondition: called directly, /sleep does put the engine to sleep."""
    request = urllib.request.Request(f"{node.engine_url}/sleep", data=b"{}", method="POST")
    urllib.request.urlopen(request, timeout=5).read()
    try:
        assert engine_asleep(node) is True
    finally:
        urllib.request.urlopen(urllib.request.Request(f"{node.engine_url}/wake_up", data=b"{}"), timeout=5).read()
    assert engine_asleep(node) is False


@pytest.mark.parametrize("with_key", [False, True], ids=["no-key", "valid-key"])
@pytest.mark.parametrize("target", TRAVERSALS)
def test_every_traversal_spelling_is_refused_and_the_engine_keeps_serving(node, target, with_key):
    headers = {"Authorization": f"Bearer {node.client_key}"} if with_key else {}
    status, body = raw_request(node, "POST", target.encode(), headers)
    error = assert_openai_error(status, body, 400)
    assert error["param"] == "path"
    assert engine_asleep(node) is False


@pytest.mark.parametrize(("method", "target"), NOT_SERVED)
def test_routes_outside_the_list_are_not_forwarded_even_with_a_valid_key(node, method, target):
    status, body = raw_request(node, method, target.encode(), {"Authorization": f"Bearer {node.client_key}"})
    expected = 405 if target == "/v1/chat/completions" else 404
    error = assert_openai_error(status, body, expected)
    if expected == 404:
        assert "not a route of this gateway" in error["message"]
    assert engine_asleep(node) is False


@pytest.mark.parametrize("target", [b"/v1/../sleep\x00", b"/v1/chat/completions\x00", b"/v1/\x00../sleep"])
def test_a_raw_nul_is_refused_by_the_http_parser_before_any_route(node, target):
    status, _ = raw_request(node, "POST", target, {"Authorization": f"Bearer {node.client_key}"})
    assert status == 400
    assert engine_asleep(node) is False


def test_an_absolute_form_target_is_refused(node):
    target = f"http://127.0.0.1:{node.port}/v1/../sleep".encode()
    status, body = raw_request(node, "POST", target, {"Authorization": f"Bearer {node.client_key}"})
    assert_openai_error(status, body, 400)


def test_after_every_attempt_the_engine_is_awake_and_chat_answers(node):
    for target in TRAVERSALS:
        raw_request(node, "POST", target.encode(), {"Authorization": f"Bearer {node.client_key}"})
    for name in DEV_ENDPOINTS:
        for prefix in ("/v1/../", "/v1/%2e%2e/", "/"):
            raw_request(node, "POST", f"{prefix}{name}".encode(), {"Authorization": f"Bearer {node.client_key}"})
    assert_engine_serving(node)
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(urllib.request.Request(f"{node.url}/v1/../sleep", data=b"{}"), timeout=5)
    assert caught.value.code in (400, 404)  # urllib may or may not normalise; either way nothing is forwarded
    assert_engine_serving(node)
