"""Suggestions in Chromium: from a parameter's page to a record of a change that improved staging, from the record to
the pool's suggestions (the record's one and a rule's, each citing its evidence), a preview of the draft version, and
the click that saves it (an agent; nothing is published). On-call reads the suggestions but gets no button."""

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.accounts.models import User
from controlplane.impact.models import ImpactRecord
from controlplane.impact.services import impact_record_change, impact_record_measure
from controlplane.nodes.models import Pool
from controlplane.params.models import TemplateVersion
from controlplane.params.services.templates import template_version_create
from tests.advice.builders import steady_rows, window_rows
from tests.browser.sessions import open_signed_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def improved_record(agent) -> ImpactRecord:
    """chat-default v2 (batch.max_size 6) was published to staging 40 minutes ago and improved its P99 at 10 QPS (as the
    impact service measures it); v3 went back to 8 after the festival, and staging runs v1 (8)."""
    v1 = TemplateVersion.objects.get(template__name="chat-default", number=1)
    v2 = template_version_create(
        actor=agent,
        template=v1.template,
        document={"inference_params": {**v1.params, "batch": {**v1.params["batch"], "max_size": 6}}},
        base_number=1,
        comment="smaller batches for the festival peak",
    )
    template_version_create(
        actor=agent, template=v1.template, document={"inference_params": v1.params}, base_number=2, comment="back to 8"
    )
    staging = Pool.objects.get(name="staging")
    changed_at = timezone.now() - timedelta(minutes=40)
    steady_rows("staging", changed_at - timedelta(seconds=600), 600, p99=1.92)
    steady_rows("staging", changed_at, 600, p99=1.41)
    record = impact_record_change(
        kind="publish",
        pool=staging,
        actor=agent,
        reason="smaller batches",
        version_before=v1,
        version_after=v2,
        changed_at=changed_at,
    )
    record = impact_record_measure(record_id=record.pk)
    assert record.outcome == ImpactRecord.Outcome.IMPROVED, record.outcome_reason
    return record


def test_parameter_page_to_record_to_suggestion_to_draft_version(seeded, server_url, new_page, shot):
    agent = User.objects.get(username="agent")
    record = improved_record(agent)
    window_rows("staging", seconds=180, long_request_share=0.08, length_hist={"le1k": 90, "le2k": 6, "gt2k": 4})

    page = new_page()
    open_signed_in(page, server_url, "agent", "/params/fields/batch.max_size/")
    shot(page, "suggestions-1-parameter-page")
    page.locator(f"a[href='/impact/{record.pk}/']").first.click()
    page.wait_for_url(f"{server_url}/impact/{record.pk}/")
    shot(page, "suggestions-2-record")
    page.click("[data-testid=record-pool-suggestions]")
    page.wait_for_url(f"{server_url}/pools/staging/#suggestions")

    cards = page.locator("[data-testid=suggestions] article")
    assert cards.count() == 2
    from_record = page.locator("[data-suggestion='record-batch.max_size']")
    assert "a change to 6 improved this pool before" in from_record.locator("h3").inner_text()
    assert from_record.locator(f"a[data-record='{record.pk}']").get_attribute("href") == f"/impact/{record.pk}/"
    rule = page.locator("[data-suggestion=long-requests]")
    assert "8.0% of requests are above 1k tokens" in rule.locator("h3").inner_text()
    evidence = rule.locator("[data-testid=suggestion-evidence]")
    assert "8.0%" in evidence.inner_text() and "(180 s)" in evidence.inner_text()
    link = evidence.get_by_role("link", name="share of requests above 1k tokens, window mean")
    assert link.get_attribute("href").startswith("/api/v1/metrics/pool/staging/?metric=long_request_share")
    page.locator("#suggestions").scroll_into_view_if_needed()
    shot(page, "suggestions-3-pool-page")

    from_record.locator("[data-testid=suggestion-open]").click()
    page.wait_for_url(f"{server_url}/pools/staging/suggestions/record-batch.max_size/")
    diff = page.locator("[data-testid=diff] tbody tr")
    assert diff.count() == 1
    assert diff.first.get_attribute("data-path") == "batch.max_size"
    assert diff.first.locator(".old").inner_text() == "8" and diff.first.locator(".new").inner_text() == "6"
    shot(page, "suggestions-4-preview")
    page.fill("input[name=comment]", "as in the festival")
    page.click("#open-draft")
    page.wait_for_url(f"{server_url}/templates/chat-default/v4/")
    assert "Saved chat-default v4 as a draft (not published)." in page.inner_text("body")
    shot(page, "suggestions-5-draft-version")

    draft = TemplateVersion.objects.get(template__name="chat-default", number=4)
    assert draft.params["batch"]["max_size"] == 6 and draft.author.username == "agent"
    assert f"impact record {record.pk} (improved)" in draft.comment and draft.comment.endswith("as in the festival")
    assert Pool.objects.get(name="staging").desired_version.number == 1

    page.goto(f"{server_url}/templates/chat-default/")
    listed = page.locator("[data-testid=suggestions] article")
    assert listed.count() == 2 and listed.first.get_attribute("data-pool") == "staging"
    page.locator("#suggestions").scroll_into_view_if_needed()
    shot(page, "suggestions-6-template-page")

    oncall = new_page()
    open_signed_in(oncall, server_url, "oncall", "/pools/staging/")
    assert oncall.locator("[data-testid=suggestions] article").count() == 2
    assert oncall.locator("[data-testid=suggestion-open]").count() == 0
