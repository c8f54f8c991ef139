"""Pool degradation in Chromium: an SRE degrades a pool from its page with a reason, every other page shows the
banner naming it (with a link), the pool timeline records the entry, an SRE degrades another pool from an incident
card on the on-call page (a card that arrived live), and ends both degradations; every switch is audited."""

import pytest

from controlplane.accounts.models import User
from controlplane.alerts.evaluation import evaluate
from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import Pool
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.operations.models import DegradationEvent, PoolDegradation
from tests.browser.sessions import open_signed_in
from tests.browser.test_oncall import off_thread, set_connected

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def switch(page, button: str, reason: str) -> None:
    """Fill the pool card's reason, press its button and accept the confirmation."""
    page.fill("[data-testid=degradation-reason]", reason)
    page.once("dialog", lambda dialog: dialog.accept())
    page.click(button)


def test_sre_degrades_a_pool_sees_the_banner_everywhere_and_ends_it(seeded, server_url, new_page, shot):
    page = new_page()
    open_signed_in(page, server_url, "sre", "/pools/staging/")
    card = page.locator("[data-testid=degradation]")
    assert card.locator("[data-testid=degradation-state]").inner_text() == "Not degraded."
    assert page.locator("[data-testid=degraded-banner]").count() == 0

    # A reason is required: the browser refuses an empty one before anything is sent.
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#degradation-enter")
    assert page.locator("[data-testid=degradation-reason]:invalid").count() == 1
    assert not PoolDegradation.objects.filter(is_active=True).exists()

    switch(page, "#degradation-enter", "queue depth alert on staging, shedding load")
    page.get_by_text("staging is degraded now.").wait_for()
    state = card.locator("[data-testid=degradation-state]").inner_text()
    assert state.startswith("Degraded since ") and "(manual, sre): queue depth alert on staging" in state
    entry = page.locator("[data-testid=timeline-degradation]").first
    assert entry.locator(".badge").text_content() == "degradation entered" and "by sre" in entry.inner_text()
    assert entry.locator(".reason").inner_text() == "queue depth alert on staging, shedding load"
    assert page.locator("#degradation-leave").is_visible()
    shot(page, "50-pool-degraded")

    # Every page carries the banner, naming the pool with a link to it.
    page.goto(f"{server_url}/templates/")
    banner = page.locator("[data-testid=degraded-banner]")
    assert "staging" in banner.inner_text() and "queue depth alert" in banner.inner_text()
    assert banner.get_by_role("link", name="staging").get_attribute("href") == "/pools/staging/"
    shot(page, "51-degraded-banner-on-templates")
    banner.get_by_role("link", name="staging").click()
    page.wait_for_url(f"{server_url}/pools/staging/")

    # An incident on prod-main arrives live on the on-call page; the SRE degrades prod-main from its card.
    def register():
        node_create(actor=User.objects.get(username="sre"), name="gpu-d1", pool=Pool.objects.get(name="prod-main"))
        set_connected("gpu-d1", True)
        evaluate()

    off_thread(register)
    page.goto(f"{server_url}/oncall/")
    page.locator("#live-state.on").wait_for()
    off_thread(lambda: (set_connected("gpu-d1", False), evaluate()))
    incident = page.locator('[data-testid="incident-node-lost"]')
    incident.wait_for()
    form = incident.locator("form.degrade-form")
    assert form.get_attribute("action") == "/pools/prod-main/degradation/"
    button = form.locator('[data-field="degrade"]')
    assert button.inner_text() == "Degrade prod-main"
    shot(page, "52-oncall-degrade-button")
    form.locator("input[name=reason]").fill("gpu-d1 lost, prod-main short of capacity")
    asked: list[str] = []
    # Dismissed first: nothing is sent; then accepted.
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    button.click()
    page.wait_for_timeout(300)
    assert asked == ["Degrade prod-main now (temperature and max_tokens capped)?"]
    assert page.url == f"{server_url}/oncall/" and not PoolDegradation.objects.filter(pool__name="prod-main").exists()
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    button.click()
    page.wait_for_url(f"{server_url}/pools/prod-main/")
    page.get_by_text("prod-main is degraded now.").wait_for()
    assert len(asked) == 2
    banner = page.locator("[data-testid=degraded-banner]")
    assert banner.get_by_role("link", name="prod-main").is_visible()
    assert banner.get_by_role("link", name="staging").is_visible()
    shot(page, "53-degraded-from-oncall")

    # Ending it needs a reason too; the banner then names only the pool still degraded, then none.
    switch(page, "#degradation-leave", "capacity back, gpu-d1 replaced")
    page.get_by_text("prod-main left degradation.").wait_for()
    assert page.locator("[data-testid=degradation-state]").inner_text() == "Not degraded."
    assert page.locator("[data-testid=degraded-banner]").get_by_role("link", name="prod-main").count() == 0
    page.goto(f"{server_url}/pools/staging/")
    switch(page, "#degradation-leave", "queue drained")
    page.get_by_text("staging left degradation.").wait_for()
    assert page.locator("[data-testid=degraded-banner]").count() == 0
    timeline = page.locator("[data-testid=timeline-degradation]")
    assert timeline.count() == 2
    assert timeline.first.locator(".badge").text_content() == "degradation left"
    assert timeline.first.locator(".reason").inner_text() == "queue drained"
    shot(page, "54-pool-degradation-ended")
    page.goto(f"{server_url}/templates/")
    assert page.locator("[data-testid=degraded-banner]").count() == 0

    audit = AuditEntry.objects.filter(action__startswith="pool.degrade").order_by("id")
    assert [(a.action, a.actor_name, a.reason) for a in audit] == [
        ("pool.degrade", "sre", "queue depth alert on staging, shedding load"),
        ("pool.degrade", "sre", "gpu-d1 lost, prod-main short of capacity"),
        ("pool.degrade_end", "sre", "capacity back, gpu-d1 replaced"),
        ("pool.degrade_end", "sre", "queue drained"),
    ]
    assert DegradationEvent.objects.filter(cause="manual").count() == 4


def test_oncall_sees_no_degrade_button(seeded, server_url, new_page):
    """Degrading is an operator's decision (SRE, admin): on-call acknowledges and silences."""
    page = new_page()
    open_signed_in(page, server_url, "oncall", "/pools/staging/")
    assert page.locator("[data-testid=degradation-state]").inner_text() == "Not degraded."
    assert page.locator("#degradation-enter").count() == 0
