"""Warmup runs in Chromium: a real agent (simulator) in the seeded staging pool, whose `faq-warmup` dataset
seed_demo assigns, warms up at start; an SRE clicks "Warm up now" on its page, the progress bar advances live
(done/total, p50/p99, concurrency, over the WebSocket) and ends "passed"; the command is audited as node.warmup.
The fleet view shows the same warmup column."""

import json
import re
import urllib.request

import pytest

from controlplane.accounts.models import User
from controlplane.audit.models import AuditEntry
from controlplane.datasets.models import WarmupDatasetVersion
from controlplane.nodes.models import EngineNode, NodeCommand, Pool
from controlplane.nodes.services.engine_nodes import node_create
from tests.browser.sessions import open_signed_in
from tests.browser.test_cleanup_flow import engine_url
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
JSON = {"Content-Type": "application/json"}
FIGURES = re.compile(r"(\d+)/(\d+) · p50 (\d+\.\d+|—) s · p99 (\d+\.\d+|—) s · concurrency (\d+)/(\d+)")


def node_row() -> EngineNode:
    return EngineNode.objects.get(name="gpu-w1")


def test_sre_warms_up_a_node_and_follows_the_progress_bar_live(seeded, server_url, new_page, shot, tmp_path):
    sre = User.objects.get(username="sre")
    staging = Pool.objects.get(name="staging")
    dataset = WarmupDatasetVersion.objects.get(dataset__name="faq-warmup", number=1)
    assert staging.warmups.filter(version=dataset).exists(), "seed_demo assigns faq-warmup to staging"
    _, token = node_create(actor=sre, name="gpu-w1", pool=staging)
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    ws_url = server_url.replace("http://", "ws://") + "/ws/agent/"
    agent = AgentProcess(name="gpu-w1", token=token, control_plane_url=ws_url, work=tmp_path, profile=profile)
    agent.start()
    try:
        # The start-up warmup (the dataset comes with the answer to the hello), then the pool's config, a cold
        # restart with its own warmup: the gate opens once that passes.
        wait_until(
            lambda: (n := node_row()).applied_version_id == staging.desired_version_id and n.warmup_state == "passed",
            90,
            "the node to apply the pool's config and pass its warmup",
        )
        wait_until(lambda: agent.health()["status"] == "online", 10, "the gate to open")
        # The row can say "passed" for the start-up warmup in the moment between the config's ACK and the config
        # warmup's first progress report: read it once it reports the warmup the node itself says it ran last.
        ran_last = agent.health()["warmup"]["trigger"]
        wait_until(
            lambda: (n := node_row()).warmup_state == "passed" and n.warmup_progress.get("trigger") == ran_last,
            10,
            f"the node's row to report its last warmup ({ran_last})",
        )
        last = node_row().warmup_progress
        assert last["trigger"] in {"start", "config"}, last
        assert last["done"] == last["total"] == dataset.message_count, last

        page = new_page()
        open_signed_in(page, server_url, "sre", "/nodes/gpu-w1/")
        cell = page.locator("[data-testid=warmup-cell] [data-testid=warmup]")
        assert cell.get_attribute("data-state") == "passed"
        assert f"{last['trigger']}: p99" in cell.inner_text()
        page.locator("#live-state.on").wait_for()

        # Slow the engine down so the replay takes several seconds (still well within warmup.max_p99_s).
        faults = json.dumps({"latency_factor": 15}).encode()
        urllib.request.urlopen(urllib.request.Request(f"{engine_url(agent)}/sim/faults", data=faults, headers=JSON))
        page.fill("[data-testid=warmup-reason]", "prefix cache cold after the festival banner change")
        page.click("#warmup-now")
        page.get_by_text("Sent warm up to gpu-w1.").wait_for()
        page.locator("#live-state.on").wait_for()
        cell = page.locator("[data-testid=warmup-cell] [data-testid=warmup]")
        page.locator("[data-testid=warmup-cell] [data-testid=warmup][data-state=running]").wait_for(timeout=20_000)
        figures = cell.locator('[data-field="warmup-figures"]')
        seen = []
        for _ in range(60):
            match = FIGURES.search(figures.inner_text()) if figures.count() else None
            if cell.get_attribute("data-state") != "running":
                break
            if match:
                seen.append((int(match[1]), int(cell.locator(".progress").get_attribute("aria-valuenow"))))
                if len(seen) == 3:
                    shot(page, "45-node-warmup-running")
            page.wait_for_timeout(250)
        # No reload in between: every figure came over the WebSocket, and the bar moved with them.
        assert len({done for done, _ in seen}) >= 3, seen
        assert seen == sorted(seen) and seen[-1][1] > seen[0][1], seen
        page.locator("[data-testid=warmup-cell] [data-testid=warmup][data-state=passed]").wait_for(timeout=60_000)
        text = cell.inner_text()
        match = FIGURES.search(text)
        assert match and match[1] == match[2] == str(dataset.message_count), text
        assert "operator: p99" in text and f"over the first {min(100, dataset.message_count)} requests" in text, text
        assert cell.locator(".progress").get_attribute("aria-valuenow") == "100"
        command = NodeCommand.objects.get(node__name="gpu-w1", op="warmup")
        row = page.locator(f'tr[data-command="{command.pk}"]')
        row.locator('[data-field="state"]', has_text="succeeded").wait_for(timeout=10_000)
        shot(page, "46-node-warmup-passed")
        entry = AuditEntry.objects.get(action="node.warmup")
        assert (entry.actor_name, entry.reason) == ("sre", "prefix cache cold after the festival banner change")
        assert entry.after == {"command": command.pk}
        wait_until(lambda: agent.health()["status"] == "online", 10, "the gate to reopen")
        status, _ = agent.chat()
        assert status == 200

        # The fleet view shows the same run in the node's row.
        page.goto(f"{server_url}/fleet/")
        fleet_cell = page.locator('tr[data-node="gpu-w1"] [data-testid=warmup]')
        assert fleet_cell.get_attribute("data-state") == "passed"
        assert FIGURES.search(fleet_cell.inner_text())
        shot(page, "47-fleet-warmup-column")
    finally:
        agent.stop()
