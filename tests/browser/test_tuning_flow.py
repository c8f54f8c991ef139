"""Tuning in Chromium: an SRE starts a two-trial study of a hot field from the new-study form against staging (one
real agent on the simulator); production is not offered; the study page follows the trials live, draws the objective
per trial and the best so far, and links the best candidate as an unpublished version.

Figures on these pages come from the simulator (labelled so), not from vLLM."""

import re

import pytest

from controlplane.accounts.models import User
from controlplane.tuning.models import TuningStudy
from tests.browser.sessions import open_signed_in
from tests.engine_node.fleet import wait_until
from tests.replays.logs import log_lines, store_log

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_sre_starts_a_study_follows_it_live_and_finds_the_best_draft(staging_served, new_page, shot):
    server = staging_served("gpu-t1")
    # Other demo nodes of staging that never connect are left out of the ACK wait (connected nodes only).
    store_log(User.objects.get(username="agent"), log_lines(300))
    page = new_page()
    page_errors = []
    page.on("pageerror", lambda error: page_errors.append(error))
    open_signed_in(page, server.url, "sre", "/tuning/new/")
    pools = page.locator("select[name=pool] option").all_inner_texts()
    assert "staging" in pools and "prod-main" not in pools
    page.select_option("select[name=log]", "festival-log")
    page.select_option("select[name=space-0-path]", "max_tokens.default")
    page.select_option("select[name=space-0-type]", "choice")
    page.fill("input[name=space-0-choices]", "200, 512")
    page.select_option("select[name=objective]", "max_throughput")
    page.select_option("select[name=sampler]", "grid")
    page.fill("input[name=budget]", "2")
    page.fill("input[name=qps]", "10")
    page.fill("input[name=duration_s]", "2")
    page.fill("input[name=p99_max_s]", "5")
    page.fill("input[name=error_rate_max]", "0.2")
    page.fill("input[name=label]", "first-turn cap")
    page.fill("input[name=reason]", "tokens per second under the cap")
    shot(page, "tuning-new")
    page.click("#study-form button[type=submit]")
    page.wait_for_load_state()
    assert page.locator("[data-testid=study-errors]").count() == 0, page.inner_text("[data-testid=study-errors]")
    page.wait_for_url(re.compile(r"/tuning/\d+/$"))
    study = TuningStudy.objects.get()
    page.locator("#live-state.on").wait_for()
    page.locator("#study-progress [data-field=status]", has_text="succeeded").wait_for(timeout=120_000)
    assert page.text_content("#study-progress [data-field=trials_done]") == "2"
    wait_until(lambda: page.get_attribute("#study-chart", "data-drawn") == "2", 10, "the chart with two trials")
    study.refresh_from_db()
    assert study.status == "succeeded", study.error
    page.reload()
    page.wait_for_function("document.getElementById('study-chart').dataset.drawn === '2'")
    assert page.locator("[data-testid=trials] tbody tr").count() == 2
    # A choice among numbers is searched by its index; the trials show the field's values, not 0 and 1.
    rows = page.locator("[data-testid=trials] tbody tr").all_inner_texts()
    assert sorted(next(v for v in (200, 512) if f"max_tokens.default={v}" in row) for row in rows) == [200, 512], rows
    assert sorted(t.params["max_tokens.default"] for t in study.trials.all()) == [200, 512]
    assert page.locator("[data-testid=simulated]").is_visible()
    best = page.locator("[data-testid=best-version] a")
    assert best.inner_text() == str(study.best_trial.version)
    assert "unpublished" in page.inner_text("[data-testid=best-version]")
    assert page.locator("#study-chart .scatterlayer .point").count() >= 2
    assert page.locator("#cancel-form").count() == 0
    shot(page, "tuning-study")

    page.goto(f"{server.url}/tuning/")
    row = page.locator(f"[data-testid=studies] tr[data-study='{study.pk}']")
    assert row.locator("[data-field=status]").text_content() == "succeeded"
    assert "first-turn cap" in row.inner_text()
    shot(page, "tuning-list")
    assert page_errors == []
