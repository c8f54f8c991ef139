"""The fleet view in Chromium: register a node, start its agent with the token shown once, watch it live."""

import re

import pytest
from openai import OpenAI

from controlplane.nodes.models import EngineNode
from tests.browser.sessions import open_signed_in
from tests.browser.test_dashboard_flow import publish
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_registered_node_comes_online_and_follows_a_publish_live(seeded, server_url, new_page, shot, tmp_path):
    page = new_page()
    open_signed_in(page, server_url, "sre", "/fleet/")
    page.fill("input[name=name]", "gpu-a1")
    page.select_option("select[name=pool]", "staging")
    page.click("text=Register and issue a token")
    token = re.search(r"cpn_[\w-]+", page.locator("[data-testid=issued-token]").inner_text()).group(0)
    shot(page, "10-fleet-token-shown-once")
    page.goto(f"{server_url}/fleet/")
    assert "cpn_" not in page.content()
    page.locator("#live-state.on").wait_for()
    row = page.locator('tr[data-node="gpu-a1"]')
    assert row.locator('[data-field="status"]').inner_text().lower() == "lost"

    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    ws_url = server_url.replace("http://", "ws://") + "/ws/agent/"
    agent = AgentProcess(name="gpu-a1", token=token, control_plane_url=ws_url, work=tmp_path, profile=profile)
    agent.start()
    try:
        # No reload: the row follows the agent's hello and ACK over the WebSocket.
        row.locator('[data-field="applied"]', has_text="chat-default v1").wait_for(timeout=20_000)
        wait_until(lambda: row.locator('[data-field="status"]').inner_text().lower() == "online", 20, "online")
        assert "simulated" in row.locator('[data-field="backend"]').inner_text().lower()

        # The node page tells a client where to send requests and which model to name; both work as shown.
        node_page = new_page()
        open_signed_in(node_page, server_url, "oncall", "/nodes/gpu-a1/")
        base_url = node_page.locator("[data-testid=gateway-url]").inner_text()
        model = node_page.locator("[data-testid=served-model-name]").inner_text()
        assert (base_url, model) == (f"{agent.url}/v1", agent.model)
        python_example = node_page.locator("[data-testid=example-python]").inner_text()
        assert f'base_url="{base_url}"' in python_example and 'api_key="<your client key>"' in python_example
        assert "Authorization: Bearer <your client key>" in node_page.locator("[data-testid=example-curl]").inner_text()
        shot(node_page, "12-node-page-clients")
        # As the example says, with a real key where it shows the placeholder.
        reply = OpenAI(base_url=base_url, api_key=agent.client_key, max_retries=0).chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Where is my order?"}], max_tokens=8
        )
        assert reply.choices[0].message.content

        operator = new_page()
        open_signed_in(operator, server_url, "sre", "/templates/chat-default/edit/")
        editor = operator.locator("#document")
        editor.fill(editor.input_value().replace("timeout_ms: 50", "timeout_ms: 45"))
        operator.click("#save")
        operator.wait_for_url(re.compile(r".*/v2/$"))
        publish(operator, server_url, "staging", "chat-default:2", "shorter batch timeout")
        page.reload()
        row = page.locator('tr[data-node="gpu-a1"]')
        row.locator('[data-field="applied"]', has_text="chat-default v2").wait_for(timeout=20_000)
        assert "complete" in page.locator("[data-testid=rollout-staging]").inner_text().lower()
        assert EngineNode.objects.get(name="gpu-a1").applied_version.number == 2
        shot(page, "11-fleet-live-after-publish")
    finally:
        agent.stop()
