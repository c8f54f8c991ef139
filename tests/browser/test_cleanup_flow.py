"""Memory cleanup in Chromium: an SRE cleans up one node from its page and the whole pool from the pool page; the
node page follows the cleanup live (running, then the before/after figures) and both actions are audited."""

import json
import re
import threading
import urllib.request

import pytest

from controlplane.accounts.models import User
from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import EngineNode, NodeCommand, Pool
from controlplane.nodes.services.engine_nodes import node_create
from tests.browser.sessions import open_signed_in
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, engine_url, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
JSON = {"Content-Type": "application/json"}


def slow_request(agent: AgentProcess, latency_factor: float = 400, tokens: int = 16) -> threading.Thread:
    """A `tokens`-token request on an engine slowed down, so the cleanup's drain takes a few seconds (or, with a
    large `latency_factor` or many tokens, until `engine_speed(agent, 1)`). A step under way when the engine is sped
    up again still ends at its slow time: many short steps end the request sooner than few long ones."""
    # A node that has just connected may still be warming up (503 "warming up"): only an online node takes it.
    wait_until(lambda: agent.health().get("status") == "online", 30, "the node to be online")
    engine_speed(agent, latency_factor)
    body = {"model": agent.model, "messages": [{"role": "user", "content": "退货"}], "max_tokens": tokens}
    body.update(min_tokens=tokens, ignore_eos=True)
    request = urllib.request.Request(
        f"{agent.url}/v1/chat/completions", data=json.dumps(body).encode(), headers=agent.headers
    )
    caller = threading.Thread(target=lambda: urllib.request.urlopen(request, timeout=60).read())
    caller.start()
    wait_until(lambda: agent.health()["in_flight"] >= 1, 10, "the slow request to be in flight")
    return caller


def engine_speed(agent: AgentProcess, latency_factor: float) -> None:
    """Slow the agent's simulated engine down (the factor applies from its next step on); 1 restores it."""
    faults = json.dumps({"latency_factor": latency_factor}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{engine_url(agent)}/sim/faults", data=faults, headers=JSON))


def test_sre_cleans_up_a_node_and_a_pool_and_sees_the_figures_live(seeded, server_url, new_page, shot, tmp_path):
    sre = User.objects.get(username="sre")
    _, token = node_create(actor=sre, name="gpu-c1", pool=Pool.objects.get(name="staging"))
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    ws_url = server_url.replace("http://", "ws://") + "/ws/agent/"
    agent = AgentProcess(name="gpu-c1", token=token, control_plane_url=ws_url, work=tmp_path, profile=profile)
    agent.start()
    try:
        wait_until(lambda: EngineNode.objects.get(name="gpu-c1").is_connected, 20, "the agent to connect")
        page = new_page()
        open_signed_in(page, server_url, "sre", "/nodes/gpu-c1/")
        # The engine stays slow (160 steps of ~0.1 s) until the page has shown the waiting drain, whatever the
        # machine's load (the agent's drain waits 10 s at most).
        caller = slow_request(agent, latency_factor=1_000, tokens=160)
        page.fill("[data-testid=cleanup-reason]", "fragmentation alert on gpu-c1")
        page.click("#cleanup-memory")
        page.get_by_text("Sent clean up memory to gpu-c1.").wait_for()
        page.locator("#live-state.on").wait_for()
        command = NodeCommand.objects.get(node__name="gpu-c1", op="cleanup")
        row = page.locator(f'tr[data-command="{command.pk}"]')
        # Loaded while the drain waits for the slow request; the rest arrives over the WebSocket.
        assert row.locator('[data-field="state"]').text_content() in {"pending", "running"}
        engine_speed(agent, 1)
        row.locator('[data-field="state"]', has_text="succeeded").wait_for(timeout=30_000)
        result = row.locator('[data-field="result"]').inner_text()
        assert re.fullmatch(r"fragmentation \d+\.\d % → \d+\.\d % · KV cache \d+\.\d % → 0\.0 % · \d+\.\d s", result), (
            result
        )
        assert "Clean up memory" in row.inner_text() and "sre" in row.inner_text()
        shot(page, "40-node-cleanup-live-result")
        caller.join(timeout=60)
        entry = AuditEntry.objects.get(action="node.cleanup")
        assert (entry.actor_name, entry.reason) == ("sre", "fragmentation alert on gpu-c1")

        urllib.request.urlopen(
            urllib.request.Request(f"{engine_url(agent)}/sim/faults", method="DELETE"), timeout=10
        ).read()
        page.goto(f"{server_url}/pools/staging/")
        page.once("dialog", lambda dialog: dialog.accept())
        page.fill("[data-testid=pool-cleanup-reason]", "weekly cleanup")
        page.click("#cleanup-pool")
        page.get_by_text("Memory cleanup of staging started, one node at a time: gpu-c1.").wait_for()
        assert AuditEntry.objects.get(action="pool.cleanup").reason == "weekly cleanup"
        wait_until(
            lambda: NodeCommand.objects.filter(node__name="gpu-c1", op="cleanup", state="succeeded").count() == 2,
            20,
            "the pool cleanup to reach gpu-c1",
        )
        page.goto(f"{server_url}/nodes/gpu-c1/")
        assert page.locator("tr[data-command]", has_text="succeeded").count() == 2
    finally:
        agent.stop()
