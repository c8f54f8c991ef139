"""The model catalog in Chromium: an SRE registers and edits a model, an admin decides trust_remote_code."""

import pytest

from controlplane.accounts.models import User
from controlplane.audit.models import AuditEntry
from controlplane.catalog.models import ModelEntry
from controlplane.params.models import ParameterTemplate
from controlplane.params.services.templates import template_version_create
from tests.browser.sessions import open_signed_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_register_edit_and_trust_a_model(seeded, server_url, new_page, shot):
    page = new_page()
    open_signed_in(page, server_url, "sre", "/templates/")
    page.click("nav >> text=Models")
    page.wait_for_url(f"{server_url}/models/")
    assert "Qwen/Qwen3-0.6B" in page.locator('tr[data-model="qwen3-0.6b"]').inner_text()
    # An SRE sees the remote-code grant but cannot give it.
    assert page.locator("[data-testid=trust-remote-code]").count() == 0

    form = page.locator("#model-form")
    form.locator("input[name=name]").fill("tiny")
    form.locator("input[name=source]").fill("--trust-remote-code.x")
    form.locator("button[type=submit]").click()
    errors = page.locator("[data-testid=model-errors]")
    errors.wait_for()
    assert "source: '--trust-remote-code.x' starts with '-'" in errors.inner_text()
    assert not ModelEntry.objects.filter(name="tiny").exists()

    form.locator("input[name=source]").fill("/srv/models/tiny")
    form.locator("input[name=revision]").fill("v1")
    form.locator("input[name=is_draft_capable]").check()
    form.locator("input[name=description]").fill("tiny test model")
    form.locator("button[type=submit]").click()
    page.get_by_text("Model tiny registered.").wait_for()
    row = page.locator('tr[data-model="tiny"]').inner_text()
    assert "/srv/models/tiny" in row and "DRAFT" in row and "off" in row
    shot(page, "85-model-catalog")

    # A template version names it; its page lists the version, pinned as the entry is now.
    version = template_version_create(
        actor=User.objects.get(username="agent"),
        template=ParameterTemplate.objects.get(name="chat-default"),
        document={"inference_params": {"engine": {"model": "tiny"}}},
        base_number=1,
        comment="run the tiny model",
    )
    page.click('tr[data-model="tiny"] >> text=tiny')
    page.wait_for_url(f"{server_url}/models/tiny/")
    usage = page.locator("[data-testid=model-usage]")
    assert "chat-default v2" in usage.inner_text() and "as it is now" in usage.inner_text()

    edit = page.locator("#model-form")
    edit.locator("input[name=revision]").fill("v2")
    edit.locator("input[name=reason]").fill("retrained weights")
    edit.locator("button[type=submit]").click()
    page.get_by_text("Model tiny saved: revision.").wait_for()
    assert "an earlier state" in page.locator("[data-testid=model-usage]").inner_text()
    # The version still runs what it pinned: revision v1.
    page.click("[data-testid=model-usage] >> text=chat-default v2")
    page.wait_for_url(f"{server_url}/templates/chat-default/v2/")
    pinned = page.locator("[data-testid=pinned-models]").inner_text()
    assert "engine.model" in pinned and "/srv/models/tiny" in pinned and "v1" in pinned
    assert version.pinned_models["engine.model"]["revision"] == "v1"
    page.go_back()

    admin = new_page()
    open_signed_in(admin, server_url, "admin", "/models/tiny/")
    form = admin.locator("#model-form")
    form.locator("[data-testid=trust-remote-code]").check()
    form.locator("input[name=reason]").fill("reviewed the repository's modelling code")
    form.locator("button[type=submit]").click()
    admin.get_by_text("Model tiny saved: trust_remote_code.").wait_for()
    assert "TRUSTED" in admin.locator("[data-testid=trust-state]").inner_text()
    shot(admin, "86-model-detail")
    entries = AuditEntry.objects.filter(target_repr="tiny", action__startswith="model.").order_by("id")
    assert [(e.action, e.actor_name) for e in entries] == [
        ("model.create", "sre"),
        ("model.update", "sre"),
        ("model.update", "admin"),
    ]
