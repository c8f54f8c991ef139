"""What the pages say about things that wait, in Chromium with real agents on the simulator: why a node is not on
its pool's desired version (the fleet view, live), why production refuses a version (staging NACKed it), and what
a pool's memory cleanup waits for (the lease another node holds), and what a pending alert waits for."""

import re
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.accounts.models import User
from controlplane.alerts.evaluation import evaluate_claimed
from controlplane.alerts.models import EvaluatorLease
from controlplane.metrics.models import MetricSample
from controlplane.nodes.models import EngineNode, NodeCommand, Pool
from controlplane.nodes.services.canary_settings import pool_canary_update
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.params.models import ParameterTemplate
from controlplane.params.services.templates import template_version_create
from tests.alerts.conftest import blank_sample
from tests.browser.sessions import open_signed_in
from tests.browser.test_cleanup_flow import engine_speed, slow_request
from tests.browser.test_dashboard_flow import off_thread, publish
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.agents, pytest.mark.django_db(transaction=True)]


def start_agents(server_url, tmp_path, pool: str, *names: str) -> list[AgentProcess]:
    sre = User.objects.get(username="sre")
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    ws_url = server_url.replace("http://", "ws://") + "/ws/agent/"
    agents = []
    for name in names:
        _, token = node_create(actor=sre, name=name, pool=Pool.objects.get(name=pool))
        agents.append(AgentProcess(name=name, token=token, control_plane_url=ws_url, work=tmp_path, profile=profile))
    with ThreadPoolExecutor(len(agents)) as starting:  # side by side: each start waits for its gateway's port
        list(starting.map(AgentProcess.start, agents))
    v1 = Pool.objects.get(name=pool).desired_version.content_hash
    wait_until(
        lambda: (
            EngineNode.objects.filter(name__in=names, applied_hash=v1, reported_status="online").count() == len(names)
        ),
        60,
        "the agents to connect and run the pool's version",
    )
    return agents


def test_the_fleet_says_why_a_node_is_not_on_the_desired_version_and_production_says_staging_nacked_it(
    seeded, server_url, new_page, shot, tmp_path
):
    sre = User.objects.get(username="sre")
    staging = Pool.objects.get(name="staging")
    pool_canary_update(
        actor=sre,
        pool=staging,
        canary_stages=[{"percent": 100}],
        analysis_window_s=staging.analysis_window_s,
        reason="every node at once",
    )
    agents = start_agents(server_url, tmp_path, "staging", "gpu-r1")
    try:
        node_create(actor=sre, name="gpu-r2", pool=staging)  # registered, its agent never started
        # The engine accepts any max_model_len up to the model's 40960 positions: 65536 fails at start-up.
        template = ParameterTemplate.objects.get(name="chat-default")
        document = {"inference_params": {"max_tokens": {"whitelist": ["legal"]}, "engine": {"max_model_len": 65536}}}
        off_thread(lambda: template_version_create(actor=sre, template=template, document=document, base_number=1))

        fleet = new_page()
        open_signed_in(fleet, server_url, "oncall", "/fleet/")
        fleet.locator("#live-state.on").wait_for()
        operator = new_page()
        open_signed_in(operator, server_url, "sre", "/templates/")
        publish(operator, server_url, "staging", "chat-default:2", "longer context for the festival")

        # The fleet page reloads on the release, then follows the node's NACK live.
        row = fleet.locator('tr[data-node="gpu-r1"]')
        reason = row.locator("[data-testid=sync-reason]")
        reason.filter(has_text="NACKed chat-default v2").wait_for(timeout=60_000)
        assert "max_model_len" in reason.inner_text()
        assert "warn" in row.locator('[data-field="applied"]').get_attribute("class")
        assert row.locator('[data-field="applied"]').inner_text() == "chat-default v1"
        assert fleet.locator('tr[data-node="gpu-r2"] [data-testid=sync-reason]').inner_text() == (
            "not connected yet: its agent gets chat-default v2 when it first connects"
        )
        # The prod nodes of the demo are not started in tests: nothing is desired of them that they lack.
        shot(fleet, "70-fleet-why-not-on-desired")

        operator.goto(f"{server_url}/pools/staging/")
        gate = operator.locator("[data-testid=gate]").inner_text()
        assert "chat-default v2 has not run on a non-production pool yet: NACKed on staging by gpu-r1:" in gate
        assert "gpu-r1 NACKed chat-default v2" in operator.locator("[data-testid=out-of-sync]").inner_text()
        shot(operator, "71-staging-gate-and-out-of-sync-nodes")

        operator.goto(f"{server_url}/pools/prod-main/")
        option = operator.locator('#publish-form option[value="chat-default:2"]').inner_text()
        assert "(has not run on non-production: NACKed on staging by gpu-r1" in option
        operator.once("dialog", lambda dialog: dialog.accept())
        operator.select_option("#publish-form select[name=version]", "chat-default:2")
        operator.fill("#publish-form textarea[name=reason]", "longer context")
        operator.click("#publish-form button[type=submit]")
        error = operator.locator("[data-testid=publish-error]").inner_text()
        assert re.search(
            r"NACKed on staging by gpu-r1: .*max_model_len.*; publish a version that staging accepts", error
        ), error
        assert Pool.objects.get(name="prod-main").desired_version.number == 1
        shot(operator, "72-production-gate-staging-nacked")
    finally:
        for agent in agents:
            agent.stop()


def test_a_pool_cleanup_shows_the_node_waiting_for_the_lease_and_follows_it_live(
    seeded, server_url, new_page, shot, tmp_path
):
    agents = start_agents(server_url, tmp_path, "staging", "gpu-p1", "gpu-p2")
    try:
        node_page = new_page()  # an on-call engineer watching gpu-p2
        open_signed_in(node_page, server_url, "oncall", "/nodes/gpu-p2/")
        node_page.locator("#live-state.on").wait_for()

        page = new_page()
        open_signed_in(page, server_url, "sre", "/pools/staging/")
        # gpu-p1's drain waits for it: 160 steps of ~0.25 s, so it holds the lease until the engine is sped up again
        # below (or the agent's drain gives up after 10 s), and then ends within a step.
        caller = slow_request(agents[0], latency_factor=2_000, tokens=160)
        page.fill("[data-testid=pool-cleanup-reason]", "fragmentation above 35 % on staging")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#cleanup-pool")
        page.get_by_text("Memory cleanup of staging started, one node at a time").wait_for()
        # The node page got the waiting cleanup live, saying what it waits for.
        command = NodeCommand.objects.get(node__name="gpu-p2", op="cleanup")
        row = node_page.locator(f'tr[data-command="{command.pk}"]')
        row.wait_for()
        lease = "waiting for the pool's cleanup lease, held by gpu-p1"
        row.locator('[data-field="progress"]', has_text=lease).wait_for()
        assert row.locator('[data-field="state"]').inner_text().lower() == "pending"
        shot(node_page, "74-node-cleanup-waiting-for-the-lease")
        waiting = page.locator("[data-testid=pool-cleanups] li", has_text="gpu-p2")
        text = waiting.locator('[data-field="waiting"]').inner_text()
        assert re.fullmatch(
            r"waiting for the pool's cleanup lease, held by gpu-p1 since \d\d:\d\d:\d\d UTC(: .+| \(\w+\)); it ends "
            r"when that cleanup does, by \d\d:\d\d:\d\d UTC at the latest",
            text,
        ), text
        shot(page, "73-pool-cleanup-waiting-for-the-lease")

        # gpu-p1 finishes; the lease passes to gpu-p2, whose row follows live to the end.
        engine_speed(agents[0], 1)
        caller.join(timeout=60)
        row.locator('[data-field="state"]', has_text="succeeded").wait_for(timeout=60_000)
        assert "fragmentation" in row.locator('[data-field="result"]').inner_text()
    finally:
        for agent in agents:
            agent.stop()


def test_the_on_call_page_says_what_a_pending_alert_waits_for(seeded, server_url, new_page, shot):
    def pending_p99():
        node_create(actor=User.objects.get(username="sre"), name="gpu-a1", pool=Pool.objects.get(name="prod-main"))
        now = timezone.now()
        EngineNode.objects.filter(name="gpu-a1").update(is_connected=True, connected_at=now, last_seen_at=now)
        MetricSample.objects.create(
            scope="node", name="gpu-a1", pool="prod-main", t=now, resolution_s=1, values=blank_sample(latency_p99_s=1.8)
        )
        assert evaluate_claimed(now=now).claimed

    page = new_page()
    open_signed_in(page, server_url, "oncall", "/oncall/")
    page.locator("#live-state.on").wait_for()
    off_thread(pending_p99)
    row = page.locator("#pending tr", has_text="p99-latency")
    row.wait_for()  # live, from the evaluator's pass
    assert re.fullmatch(
        r"condition holding since \d\d:\d\d:\d\d UTC; fires at \d\d:\d\d:\d\d UTC unless it clears first",
        row.locator('[data-field="waiting"]').inner_text(),
    )
    assert page.locator("[data-testid=evaluator-state]").is_hidden()
    shot(page, "75-oncall-pending-alert-waits-for")

    # Evaluation stops (its last completed pass five minutes ago): the page says that is what everything waits for.
    EvaluatorLease.objects.filter(pk=1).update(last_succeeded_at=timezone.now() - timedelta(minutes=5))
    page.reload()
    banner = page.locator("[data-testid=evaluator-state]")
    assert banner.is_visible()
    assert re.fullmatch(
        r"alert evaluation last completed a pass at \d\d:\d\d:\d\d UTC \(5 min( \d+ s)? ago\): nothing fires until it "
        r"runs",
        banner.inner_text(),
    ), banner.inner_text()
    assert page.locator("#pending tr", has_text="p99-latency").locator('[data-field="waiting"]').inner_text() == (
        banner.inner_text()
    )
    shot(page, "76-oncall-evaluation-stopped")
