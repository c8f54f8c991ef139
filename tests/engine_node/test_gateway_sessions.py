"""Stream sessions through a real gateway and simulator: drop a stream, resume it, or come back too late."""

import http.client
import json
import time

import pytest

from engine_node.sessions import verify_chain
from tests.engine_node.test_gateway_policy import start_node

pytestmark = pytest.mark.agents

# ~50 ms per token and 60-100 tokens: a stream runs for a few seconds, long enough to drop it mid-answer and come
# back while it still runs. A reply asked to outlast the 5 s grace sets its length (min_tokens, ignore_eos).
SLOW_REPLIES = """
latency:
  time_scale: 5
reply_length:
  median: 80
  sigma: 0.2
  min: 60
  max: 100
"""
# ~10 s at ~50 ms a token: still generating when the 5 s grace after a drop runs out.
OUTLASTS_THE_GRACE = {"min_tokens": 200, "max_tokens": 200, "ignore_eos": True}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    agent = start_node(tmp_path_factory, "session-node", params={"max_tokens": {"default": 512}}, profile=SLOW_REPLIES)
    yield agent
    agent.stop()


class Stream:
    """A raw SSE reader that can drop its connection at any point, as a flaky mobile client does."""

    def __init__(self, node, method, path, body=None):
        self.connection = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        headers["Authorization"] = node.headers["Authorization"]
        self.connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        self.response = self.connection.getresponse()

    def events(self):
        """(event name, data) pairs until [DONE] or the end of the body."""
        event, data = "message", None
        while True:
            line = self.response.fp.readline()
            if not line:
                return
            line = line.decode("utf-8").rstrip("\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
            elif line == "" and data is not None:
                if data == "[DONE]":
                    return
                yield event, json.loads(data)
                event, data = "message", None

    def drop(self):
        self.connection.sock.close()
        self.connection.close()


def _start(node, **params):
    body = {
        "model": "simulated-chat-model",
        "messages": [{"role": "user", "content": "请详细介绍一下你们的退换货流程"}],
        "stream": True,
        "max_tokens": 400,
        **params,
    }
    return Stream(node, "POST", "/v1/chat/completions", body)


def _text(chunks):
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


def test_a_stream_dropped_mid_answer_resumes_within_5_s_with_nothing_missing_or_repeated(node):
    first = _start(node)
    session_id = first.response.getheader("X-Session-Id")
    seed = int(first.response.getheader("X-Session-Seed"))
    assert first.response.getheader("X-Engine-Node") == "session-node"
    received = []
    for _, chunk in first.events():
        received.append(chunk)
        if len(received) == 12:
            break
    first.drop()
    time.sleep(1.5)
    last_seq = received[-1]["x_seq"]
    rest = Stream(node, "GET", f"/v1/sessions/{session_id}/stream?after={last_seq}")
    assert rest.response.status == 200
    resumed = [chunk for _, chunk in rest.events()]
    chunks = received + resumed
    assert [c["x_seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert chunks[-1].get("x_final") is True
    assert verify_chain(session_id, seed, chunks)
    # The same request with the session's seed is a fresh stream of the same answer: nothing lost at the seam.
    again = Stream(
        node,
        "POST",
        "/v1/chat/completions",
        {
            "model": "simulated-chat-model",
            "messages": [{"role": "user", "content": "请详细介绍一下你们的退换货流程"}],
            "stream": True,
            "max_tokens": 400,
            "seed": seed,
        },
    )
    assert _text(chunks) == _text([chunk for _, chunk in again.events()])


def test_after_5_s_away_the_client_gets_the_interrupted_event(node):
    first = _start(node, **OUTLASTS_THE_GRACE)
    session_id = first.response.getheader("X-Session-Id")
    received = []
    for _, chunk in first.events():
        received.append(chunk)
        if len(received) == 5:
            break
    first.drop()
    time.sleep(6.5)
    late = Stream(node, "GET", f"/v1/sessions/{session_id}/stream?after={received[-1]['x_seq']}")
    events = list(late.events())
    assert len(events) == 1
    name, data = events[0]
    assert name == "interrupted"
    assert data["error"]["message"] == "generation interrupted"


def test_resuming_an_unknown_session_or_a_bad_position_is_a_clear_error(node):
    missing = Stream(node, "GET", "/v1/sessions/AAAAAAAAAAAAAAAAAAAAAA/stream?after=0")
    assert missing.response.status == 404
    assert "unknown" in json.loads(missing.response.read())["error"]["message"]
    first = _start(node)
    session_id = first.response.getheader("X-Session-Id")
    bad = Stream(node, "GET", f"/v1/sessions/{session_id}/stream?after=banana")
    assert bad.response.status == 400
    assert json.loads(bad.response.read())["error"]["param"] == "after"
    first.drop()
