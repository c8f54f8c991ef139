"""The operator's path through the dashboard in Chromium: edit, validate, save, diff, publish, roll back."""

import re
import threading

import pytest
from django.db import connection

from controlplane.accounts.models import User
from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import Pool
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.params.models import TemplateVersion
from tests.browser.sessions import open_signed_in
from tests.factories import ran_healthy

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def off_thread(work) -> None:
    """Services that send events (async_to_sync) run off this thread, where Playwright's event loop runs."""

    def run():
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def login(page, base: str, role: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", role)
    page.fill("input[name=password]", f"{role}-demo-pass")
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")
    assert page.text_content("[data-testid=current-user]") == role


def publish(page, base: str, pool: str, ref: str, reason: str) -> None:
    page.goto(f"{base}/pools/{pool}/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.select_option("#publish-form select[name=version]", ref)
    page.fill("#publish-form textarea[name=reason]", reason)
    page.click("#publish-form button[type=submit]")
    page.locator("[role=status]", has_text="Published").wait_for()


def test_edit_validate_save_diff_publish_and_roll_back(seeded, server_url, new_page, shot):
    page = new_page()
    login(page, server_url, "agent")

    # An invalid value shows inline while typing, and submitting it anyway stores nothing.
    page.goto(f"{server_url}/templates/chat-default/edit/")
    editor = page.locator("#document")
    seed_text = editor.input_value()
    assert "strict: 0.3" in seed_text
    editor.fill(seed_text.replace("strict: 0.3", "strict: 5"))
    errors = page.locator("[data-testid=errors]")
    errors.get_by_text("must be between 0 and 2").wait_for()
    assert "temperature.strict" in errors.inner_text()
    assert "hot" in errors.inner_text().lower()
    shot(page, "01-editor-inline-error")
    page.fill("input[name=comment]", "try a strict temperature of 5")
    page.click("#save")
    page.wait_for_load_state()
    assert "temperature.strict: must be between 0 and 2, got 5" in page.locator("[data-testid=errors]").inner_text()
    assert TemplateVersion.objects.filter(template__name="chat-default").count() == 1
    assert not AuditEntry.objects.filter(action="template.version_create", actor_name="agent").exists()

    # A valid edit becomes version 2, edited from version 1.
    editor = page.locator("#document")
    editor.fill(seed_text.replace("strict: 0.3", "strict: 0.2").replace("timeout_ms: 50", "timeout_ms: 40"))
    page.locator("#validity").get_by_text("valid").wait_for()
    page.fill("input[name=comment]", "tighter strict tier and batch timeout")
    page.click("#save")
    page.wait_for_url(re.compile(r".*/templates/chat-default/v2/$"))
    assert page.locator("tr[data-path='temperature.strict'] td.value").inner_text() == "0.2"
    assert page.locator("tr[data-path='engine.max_num_seqs'] .badge").inner_text().lower() == "cold"
    shot(page, "02-version-2-fields")

    page.click("text=Diff with v1")
    diff = page.locator("[data-testid=diff]")
    diff.wait_for()
    rows = diff.locator("tbody tr")
    assert rows.count() == 2
    strict_row = diff.locator("tr[data-path='temperature.strict']")
    assert strict_row.locator("td.old").inner_text() == "0.3"
    assert strict_row.locator("td.new").inner_text() == "0.2"
    assert strict_row.locator(".badge").inner_text().lower() == "hot"
    assert page.get_by_text("Hot fields only").is_visible()
    shot(page, "03-diff-v1-v2")

    # An agent sees no publish form.
    page.goto(f"{server_url}/pools/staging/")
    assert page.locator("#publish-form").count() == 0

    sre = new_page()
    open_signed_in(sre, server_url, "sre", "/pools/prod-main/")
    # An on-call engineer watching prod-main sees the releases arrive without reloading.
    watcher = new_page()
    open_signed_in(watcher, server_url, "oncall", "/pools/prod-main/")
    watcher.locator("#live-state.on").wait_for()

    # Production refuses a version that never ran on a non-production pool.
    sre.once("dialog", lambda dialog: dialog.accept())
    sre.select_option("#publish-form select[name=version]", "chat-default:2")
    sre.fill("#publish-form textarea[name=reason]", "festival tuning")
    sre.click("#publish-form button[type=submit]")
    sre.locator("[data-testid=publish-error]").wait_for()
    assert (
        "chat-default v2 has not run on a non-production pool yet: it was never published to a non-production pool"
        in sre.locator("[data-testid=publish-error]").inner_text()
    )
    assert Pool.objects.get(name="prod-main").desired_version.number == 1
    shot(sre, "04-production-gate")

    # Both pools run the seed's v1 already; v2 goes to staging, where a node runs it healthy for the soak window.
    publish(sre, server_url, "staging", "chat-default:2", "festival tuning, stage 1")
    off_thread(
        lambda: ran_healthy(
            node_create(actor=User.objects.get(username="sre"), name="gpu-s1", pool=Pool.objects.get(name="staging"))[
                0
            ],
            TemplateVersion.objects.get(template__name="chat-default", number=2),
        )
    )
    publish(sre, server_url, "prod-main", "chat-default:2", "staging clean for five minutes")
    assert Pool.objects.get(name="prod-main").desired_version.number == 2
    watcher.locator("#releases li.fresh").first.wait_for()
    assert "prod-main → chat-default v2" in watcher.locator("#releases").inner_text()
    shot(watcher, "05-live-timeline-on-call")

    # Roll prod-main back after reading the preview.
    sre.goto(f"{server_url}/pools/prod-main/")
    sre.click("#rollback-preview")
    sre.locator("[data-testid=rollback-target]").wait_for()
    assert sre.locator("[data-testid=rollback-target]").inner_text() == "chat-default v1"
    preview = sre.locator("[data-testid=diff]")
    assert preview.locator("tr[data-path='batch.timeout_ms'] td.new").inner_text() == "50"
    shot(sre, "06-rollback-preview")
    sre.fill("textarea[name=reason]", "P99 regression on prod-main")
    sre.click("#confirm-rollback")
    sre.get_by_text("Rolled prod-main back to chat-default v1").wait_for()
    assert sre.locator("[data-testid=desired-version]").inner_text() == "chat-default v1"
    timeline = sre.locator("[data-testid=timeline]").inner_text()
    assert "P99 regression on prod-main" in timeline
    shot(sre, "07-pool-after-rollback")

    sre.goto(f"{server_url}/audit/?target=prod-main")
    body = sre.locator("table.audit").inner_text()
    assert "pool.rollback" in body and "pool.publish" in body
    shot(sre, "08-audit-log")
