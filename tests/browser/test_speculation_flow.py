"""The speculative-decoding rule on the node page in Chromium: a node whose drafts are rejected turns speculation
off by itself; its page shows the state and the reason with the figures, the operations list the system's command,
and people are not offered the rule's operations."""

import threading

import pytest
from django.db import connection

from controlplane.accounts.models import User
from controlplane.nodes.models import EngineNode, NodeCommand
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.browser.sessions import open_signed_in
from tests.engine_node.fleet import AgentProcess, Traffic, wait_until
from tests.engine_node.test_fleet_speculation import BAD, RULE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def off_thread(work):
    """Run `work` in another thread: publishing sends async events, and Playwright's loop runs on this one."""
    result = {}

    def run():
        try:
            result["value"] = work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return result["value"]


def test_the_node_page_shows_the_rule_turning_speculation_off(seeded, server_url, new_page, shot, tmp_path):
    sre = User.objects.get(username="sre")

    def setup():
        pool = pool_create(actor=sre, name="spec-lab", is_production=False)
        _, token = node_create(actor=sre, name="gpu-s1", pool=pool)
        template = template_create(actor=sre, name="spec-chat")
        document = {"inference_params": {"speculative": RULE, "max_tokens": {"whitelist": []}}}
        version = template_version_create(actor=sre, template=template, document=document, base_number=None)
        pool_publish(actor=sre, pool=pool, version=version, reason="speculate with n-grams")
        return token

    token = off_thread(setup)
    profile = tmp_path / "spec.yaml"
    profile.write_text(BAD)
    ws_url = server_url.replace("http://", "ws://") + "/ws/agent/"
    agent = AgentProcess(name="gpu-s1", token=token, control_plane_url=ws_url, work=tmp_path, profile=profile)
    agent.start()
    try:
        wait_until(lambda: EngineNode.objects.get(name="gpu-s1").is_connected, 20, "the agent to connect")
        with Traffic([agent]) as traffic:
            wait_until(
                lambda: NodeCommand.objects.filter(op="speculation_off", state="succeeded").exists(),
                60,
                "the rule to turn speculation off",
                explain=lambda: str(agent.health().get("speculation")),
            )
            wait_until(lambda: EngineNode.objects.get(name="gpu-s1").speculation.get("state") == "off", 15, "report")
        assert traffic.failed == 0, traffic.outcomes

        page = new_page()
        open_signed_in(page, server_url, "sre", "/nodes/gpu-s1/")
        cell = page.locator("[data-testid=speculation-cell]")
        assert cell.locator(".badge").text_content() == "off"
        change = page.locator("[data-testid=speculation-change]").inner_text()
        assert f"draft rejection above 40% for 3 consecutive {RULE['window_s']} s windows" in change, change
        command = NodeCommand.objects.get(op="speculation_off")
        row = page.locator(f'tr[data-command="{command.pk}"]')
        assert "Speculative decoding off" in row.inner_text() and "automatic" in row.inner_text()
        result = row.locator('[data-field="result"]').inner_text()
        assert result == "engine restarted without speculative decoding · warmup skipped", result
        options = page.locator("select[name=op] option").all_inner_texts()
        assert "Restart engine" in options and not any("Speculative" in o for o in options), options
        shot(page, "45-node-speculation-off")
    finally:
        agent.stop()
