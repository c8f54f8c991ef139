"""Customer service in Chromium: set a conversation override, revoke it, and find both in the audit log."""

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.operations.models import ConversationOverride
from tests.browser.sessions import open_signed_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_set_and_revoke_an_override_and_read_the_audit_log(seeded, server_url, new_page, shot):
    page = new_page()
    open_signed_in(page, server_url, "agent", "/templates/")
    page.click("nav >> text=Overrides")
    page.wait_for_url(f"{server_url}/overrides/")
    assert "No override is in effect" in page.locator("[data-testid=overrides]").inner_text()

    # A conversation id with a space is refused inline, and the form keeps what was typed.
    form = page.locator("#override-form")
    form.locator("select[name=pool]").select_option("prod-main")
    form.locator("input[name=conversation]").fill("conv 8812")
    form.locator("select[name=tier]").select_option("strict")
    form.locator("input[name=reason]").fill("客户对退款金额有争议")
    form.locator("button[type=submit]").click()
    errors = page.locator("[data-testid=override-errors]")
    errors.wait_for()
    assert "conversation: must be printable characters without whitespace" in errors.inner_text()
    assert not ConversationOverride.objects.exists()

    form.locator("input[name=conversation]").fill("conv-8812")
    form.locator("input[name=expires_in_minutes]").fill("45")
    form.locator("button[type=submit]").click()
    page.get_by_text("Override set: conversation conv-8812 on prod-main, tier strict.").wait_for()
    row = page.locator('tr[data-conversation="conv-8812"]')
    cells = row.inner_text().replace("\xa0", " ")
    assert "prod-main" in cells and "STRICT" in cells and "客户对退款金额有争议" in cells and "agent" in cells
    assert "44 minutes" in cells or "45 minutes" in cells
    shot(page, "30-override-set")

    row.locator("input[name=reason]").fill("customer accepted the refund")
    row.locator("button", has_text="Revoke").click()
    page.get_by_text("Override revoked: conversation conv-8812 on prod-main.").wait_for()
    assert page.locator('tr[data-conversation="conv-8812"]').count() == 0
    assert ConversationOverride.objects.get().revoke_reason == "customer accepted the refund"

    page.goto(f"{server_url}/audit/?target=conv-8812")
    audit = page.locator("table.audit").inner_text()
    assert "override.set" in audit and "override.revoke" in audit
    assert "customer accepted the refund" in audit and "客户对退款金额有争议" in audit
    assert AuditEntry.objects.filter(action__startswith="override.", actor_name="agent").count() == 2
    page.locator("tr", has_text="override.revoke").locator("summary").click()
    shot(page, "31-override-audit-log")
