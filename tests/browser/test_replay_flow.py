"""Replays in Chromium: tuning staff start a replay of a stored log against staging (one real agent on the
simulator) from the new-run form; production is refused with the field named; the run page's progress counts up
live over the WebSocket; the cancel button stops it and the page shows `cancelled`.

Figures on these pages come from the simulator (labelled so), not from vLLM."""

import re

import pytest

from controlplane.accounts.models import User
from controlplane.replays.models import ReplayRequest, ReplayRun
from tests.browser.sessions import open_signed_in
from tests.engine_node.fleet import wait_until
from tests.replays.logs import log_lines, store_log

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_agent_starts_a_replay_follows_it_live_and_cancels_it(staging_served, new_page, shot):
    server = staging_served("gpu-r1")
    store_log(User.objects.get(username="agent"), log_lines(600))
    page = new_page()
    open_signed_in(page, server.url, "agent", "/replays/new/")
    page.select_option("select[name=pool]", "prod-main")
    page.select_option("select[name=log]", "festival-log")
    page.fill("input[name=qps]", "10")
    page.select_option("select[name=arrival]", "uniform")
    page.fill("input[name=reason]", "baseline before the cap change")
    page.click("#replay-form button[type=submit]")
    errors = page.locator("[data-testid=replay-errors]")
    assert "pool: prod-main is a production pool" in errors.inner_text()
    assert page.locator("input[name=production_override_reason]").count() == 0  # agents cannot override
    shot(page, "replay-production-refused")

    page.select_option("select[name=pool]", "staging")
    page.fill("input[name=label]", "cap 256 baseline")
    page.click("#replay-form button[type=submit]")
    page.wait_for_url(re.compile(r"/replays/\d+/$"))
    run = ReplayRun.objects.get()
    page.locator("#live-state.on").wait_for()
    page.locator("#replay-progress [data-field=status]", has_text="running").wait_for(timeout=30_000)
    wait_until(lambda: int(page.text_content("#replay-progress [data-field=done]")) >= 20, 20, "live progress")
    assert page.text_content("#replay-progress [data-field=planned]") == "600"
    assert page.locator("[data-testid=replay-figures]").is_visible()
    shot(page, "replay-running")

    page.fill("#cancel-form input[name=reason]", "enough for a baseline")
    page.click("#cancel-form button[type=submit]")
    page.locator("#replay-progress [data-field=status]", has_text="cancelled").wait_for(timeout=10_000)
    run.refresh_from_db()
    assert run.status == "cancelled" and run.sent < 600
    assert ReplayRequest.objects.filter(run=run).count() == run.sent
    page.reload()
    assert page.locator("[data-testid=replay-requests] tbody tr").count() == min(run.sent, 50)
    assert page.locator("#cancel-form").count() == 0
    shot(page, "replay-cancelled")

    page.goto(f"{server.url}/replays/")
    row = page.locator(f"[data-testid=replays] tr[data-run='{run.pk}']")
    assert row.locator("[data-field=status]").text_content() == "cancelled"
    assert "cap 256 baseline" in row.inner_text()
    shot(page, "replay-list")
