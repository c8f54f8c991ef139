"""Gateway client keys on the pool page in Chromium: an SRE issues a key with its business tags and sees it this once,
a reload shows only its prefix, the SRE revokes it with a reason; tuning staff see the keys but no way to issue or
revoke one. Both changes are audited and leave only the key's hash in the database."""

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import ClientKey
from engine_node.client_keys import key_sha256
from tests.browser.sessions import open_signed_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_sre_issues_a_key_sees_it_once_and_revokes_it(seeded, server_url, new_page, shot):
    page = new_page()
    open_signed_in(page, server_url, "sre", "/pools/staging/")
    card = page.locator("[data-testid=client-keys]")
    assert "No keys: this pool's nodes answer every /v1 request with 401." in card.inner_text()

    page.fill("[data-testid=client-key-name]", "web-chat")
    page.fill("[data-testid=client-key-tags]", "order, legal")
    page.click("#client-key-create")
    key = page.locator("[data-testid=issued-key-value]").inner_text().strip()
    assert key.startswith("cpk_") and len(key) == 47
    stored = ClientKey.objects.get(name="web-chat")
    assert stored.key_hash == key_sha256(key) and stored.business_tags == ["legal", "order"]
    row = card.locator("tr[data-key=web-chat]")
    text = row.text_content()
    assert stored.key_prefix in text and "legal" in text and "live" in text
    shot(page, "75-pool-client-key-issued")

    # Shown once: the page after a reload has the prefix and nothing more.
    page.goto(f"{server_url}/pools/staging/")
    assert page.locator("[data-testid=issued-key]").count() == 0
    assert key not in page.content() and stored.key_prefix in page.content()

    row = page.locator("[data-testid=client-keys] tr[data-key=web-chat]")
    row.locator("input[name=reason]").fill("rotating after the pilot")
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke").click()
    page.get_by_text("Key web-chat").wait_for()
    row = page.locator("[data-testid=client-keys] tr[data-key=web-chat]")
    assert "revoked" in row.text_content() and "rotating after the pilot" in row.text_content()
    assert row.get_by_role("button", name="Revoke").count() == 0
    assert ClientKey.objects.get(pk=stored.pk).revoked_at is not None
    assert list(
        AuditEntry.objects.filter(action__startswith="client_key.").order_by("id").values_list("action", flat=True)
    ) == [
        "client_key.create",
        "client_key.revoke",
    ]
    shot(page, "76-pool-client-key-revoked")

    tuning = new_page()
    open_signed_in(tuning, server_url, "agent", "/pools/staging/")
    assert "web-chat" in tuning.locator("[data-testid=client-keys]").inner_text()
    assert tuning.locator("#client-key-create").count() == 0
