"""Warmup datasets in Chromium: a broken log is refused row by row, a good one becomes a dataset of its top
queries, previewed, then assigned to staging."""

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.datasets.models import PoolWarmup, WarmupDataset
from tests.browser.sessions import open_signed_in
from tests.datasets.warmup_data import CONVERSATIONS, EXPECTED_TOP, conversation_lines

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def create_from_log(page, base: str, name: str, log: str, top_n: int) -> None:
    page.goto(f"{base}/warmup/")
    form = page.locator("#warmup-create-form")
    form.locator("input[name=name]").fill(name)
    form.locator("input[name=description]").fill("Questions of the first festival evening")
    form.locator("input[name=source][value=conversation_log]").check()
    form.locator("input[name=top_n]").fill(str(top_n))
    form.locator("input[name=file]").set_input_files(
        files=[{"name": "festival.jsonl", "mimeType": "application/x-ndjson", "buffer": log.encode()}]
    )
    form.locator("button[type=submit]").click()
    page.wait_for_load_state()


def test_derive_from_a_log_preview_and_assign_to_staging(seeded, server_url, new_page, shot):
    base = server_url
    page = new_page()
    open_signed_in(page, base, "sre", "/templates/")
    page.click("nav >> text=Warmup")
    page.wait_for_url(f"{base}/warmup/")
    # The demo's dataset is every pool's warmup already.
    assert "faq-warmup" in page.locator("[data-testid=warmup-datasets]").inner_text()
    assert "faq-warmup v1" in page.locator('[data-testid=pool-warmups] tr[data-pool="staging"]').inner_text()

    # A log with a broken line is refused, naming the row and field; nothing is stored.
    broken = conversation_lines() + '{"role": "user", "content": "还有赠品吗"}\n'
    create_from_log(page, base, "festival-evening", broken, top_n=4)
    errors = page.locator("[data-testid=upload-errors]")
    errors.wait_for()
    assert "row 9: conversation_id: required on a message line" in errors.inner_text()
    assert not WarmupDataset.objects.filter(name="festival-evening").exists()
    shot(page, "60-warmup-log-refused")

    create_from_log(page, base, "festival-evening", conversation_lines(), top_n=4)
    page.get_by_text("Warmup dataset festival-evening: the top 4 of 6 distinct queries in 13 user messages").wait_for()
    assert page.url == f"{base}/warmup/festival-evening/"
    summary = page.locator("[data-testid=version-summary]").inner_text()
    assert f"read 8 rows, {len(CONVERSATIONS)} conversations, 13 user messages, 6 distinct queries" in summary
    rows = page.locator("[data-testid=preview] tbody tr")
    assert rows.count() == 4
    for i, expected in enumerate(EXPECTED_TOP[:4]):
        cells = rows.nth(i).locator("td")
        assert (cells.nth(1).inner_text(), cells.nth(4).inner_text()) == (expected["text"], str(expected["count"]))
    counts = page.locator("[data-testid=intent-counts] tbody tr")
    assert counts.count() == 1 and "no intent given" in counts.first.inner_text()
    shot(page, "61-warmup-derived-preview")

    # The pool list names what each pool warms up with now; assigning asks for a reason and a confirmation.
    select = page.locator("#assign-form select[name=pool]")
    assert "staging — now: faq-warmup v1" in select.inner_text()
    select.select_option("staging")
    page.fill("#assign-form textarea[name=reason]", "this evening's questions, before tonight's cold restart")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#assign-form button[type=submit]")
    page.get_by_text("staging now warms up with festival-evening v1").wait_for()
    assert page.locator('[data-testid=versions] tr[data-version="1"] td.pools').inner_text() == "staging"
    active = PoolWarmup.objects.get(pool__name="staging", is_active=True)
    assert (active.version.dataset.name, active.version.number) == ("festival-evening", 1)
    assert PoolWarmup.objects.filter(pool__name="prod-main", is_active=True).get().version.dataset.name == (
        "faq-warmup"
    )
    entry = AuditEntry.objects.get(action="warmup.assign", actor_name="sre")
    assert entry.target_repr == "staging" and entry.before["warmup"]["dataset"] == "faq-warmup"
    shot(page, "62-warmup-assigned")

    page.click("nav >> text=Warmup")
    staging_row = page.locator('[data-testid=pool-warmups] tr[data-pool="staging"]').inner_text()
    assert "festival-evening v1" in staging_row and "before tonight's cold restart" in staging_row
    shot(page, "63-warmup-pools")
