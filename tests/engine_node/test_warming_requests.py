"""A warming node answers at once: 503 in the OpenAI error shape saying it is warming up, with a short Retry-After,
instead of holding the request for the queue timeout and then answering "engine unavailable; retry after 30s".

A stand-alone agent on the simulator starts with a warmup dataset on its disk and a profile slow enough that the
replay lasts several seconds; requests sent meanwhile are timed.
"""

import json
import time
import urllib.error
import urllib.request

import pytest

from engine_node.warmup import messages_sha256
from tests.engine_node.fleet import AgentProcess, wait_until
from tests.engine_node.test_gateway_policy import write_state

pytestmark = pytest.mark.agents

# About 0.1-0.2 s per request at concurrency 1: 60 messages keep the node warming for several seconds.
SLOW_PROFILE = """
latency:
  time_scale: 1.0
reply_length:
  median: 8
  sigma: 0.2
  min: 6
  max: 10
"""
WARMUP = {"initial_concurrency": 1, "capacity_fraction": 0.01, "check_requests": 60, "max_p99_s": 30,
          "step_s": 60, "max_duration_s": 120}  # fmt: skip
QUEUE_TIMEOUT_S = 30


def post(agent: AgentProcess) -> tuple[int, dict, dict, float]:
    body = {"model": agent.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    request = urllib.request.Request(f"{agent.url}/v1/chat/completions", json.dumps(body).encode(), agent.headers)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=QUEUE_TIMEOUT_S + 10) as response:
            return response.status, json.loads(response.read()), dict(response.headers), time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers), time.monotonic() - started


def test_a_warming_node_answers_503_warming_up_at_once_then_serves(tmp_path):
    profile = tmp_path / "slow.yaml"
    profile.write_text(SLOW_PROFILE)
    write_state(tmp_path / "warm-node", params={"warmup": WARMUP, "max_tokens": {"default": 8}})
    messages = [{"text": f"我的订单{i}到哪了？"} for i in range(60)]
    document = {"version_id": 1, "sha256": messages_sha256(messages), "messages": messages}
    (tmp_path / "warm-node" / "warmup_dataset.json").write_text(json.dumps(document), encoding="utf-8")
    agent = AgentProcess(
        name="warm-node", control_plane_url=None, work=tmp_path, profile=profile, queue_timeout_s=QUEUE_TIMEOUT_S
    )
    try:
        agent.start()
        wait_until(lambda: (agent.health().get("warmup") or {}).get("done", 0) >= 3, 30, "the warmup to run")
        assert agent.health()["status"] == "warming"
        status, reply, headers, seconds = post(agent)
        assert status == 503 and seconds < 2, (status, seconds)
        assert set(reply["error"]) == {"message", "type", "param", "code"} and reply["error"]["code"] == 503
        assert "warming up" in reply["error"]["message"] and "warm-node" in reply["error"]["message"]
        assert "warmup requests done" in reply["error"]["message"]
        assert 1 <= int(headers["Retry-After"]) <= 5
        # Its Retry-After is honest: within a few of them the node serves.
        wait_until(lambda: agent.health()["status"] == "online", 60, "the warmup to pass")
        assert agent.health()["warmup"]["state"] == "passed"
        assert post(agent)[0] == 200
        metrics = urllib.request.urlopen(f"{agent.url}/metrics", timeout=10).read().decode()
        assert 'engine_node_admission_rejections_total{queue="short",reason="warming"} 1.0' in metrics
    finally:
        agent.stop()
