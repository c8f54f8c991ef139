"""The intent model path in Chromium: upload (a refused file, then a good one), train with a live progress bar,
read the evaluation and confusion matrix, publish to a pool."""

import time

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.datasets.models import IntentDataset, IntentModel, IntentModelRelease
from engine_node.policy.dataset import LABELS
from tests.browser.sessions import open_signed_in
from tests.datasets.data import as_csv, easy_rows

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def upload(page, base: str, name: str, content: bytes, filename: str = "rows.csv") -> None:
    page.goto(f"{base}/intents/")
    page.fill("#upload-form input[name=name]", name)
    page.set_input_files(
        "#upload-form input[name=file]", files=[{"name": filename, "mimeType": "text/csv", "buffer": content}]
    )
    page.click("#upload-form button[type=submit]")
    page.wait_for_load_state()


def test_upload_train_watch_progress_and_publish(seeded, server_url, new_page, shot):
    base = server_url
    page = new_page()
    open_signed_in(page, base, "sre", "/templates/")
    page.click("nav >> text=Intents")
    assert "shop-intents" in page.locator("[data-testid=datasets]").inner_text()

    # A file with bad rows is refused row by row, and nothing is stored.
    rows = easy_rows()
    bad = [*rows[:40], {"text": "where is my parcel", "label": "shipping"}, {"text": " ", "label": "other"}]
    upload(page, base, "broken", as_csv(bad))
    errors = page.locator("[data-testid=upload-errors]")
    errors.wait_for()
    text = errors.inner_text()
    assert "row 42: label: unknown label 'shipping'" in text
    assert "row 43: text: must not be empty" in text
    assert "too few examples to train" in text
    assert not IntentDataset.objects.filter(name="broken").exists()
    shot(page, "20-intents-upload-refused")

    upload(page, base, "small", as_csv(rows))
    page.get_by_text(f"Dataset small: {len(rows)} rows stored").wait_for()
    counts = page.locator("[data-testid=label-counts]")
    assert counts.locator("tbody tr").count() == len(LABELS)
    assert counts.locator("tr[data-label=order_status] td.count").inner_text() == str(
        sum(r["label"] == "order_status" for r in rows)
    )
    shot(page, "21-intents-dataset")

    # Training: the bar moves over the WebSocket; the page never reloads, and the evaluation appears at the end.
    page.fill("#train-form input[name=epochs]", "40")
    page.click("#train-form button[type=submit]")
    page.wait_for_url(f"{base}/intents/datasets/small/models/1/")
    page.evaluate("window.__sameDocument = true")
    status = page.locator("[data-testid=model-status]")
    status.filter(has_text="training").wait_for()
    shots: dict = {}
    seen = []
    deadline = time.monotonic() + 120
    while status.text_content().strip() not in ("succeeded", "failed") and time.monotonic() < deadline:
        seen.append(int(page.locator("[data-testid=model-progress]").inner_text().rstrip("%")))
        if 30 <= seen[-1] < 100 and "22" not in shots:
            shots["22"] = shot(page, "22-intents-training-progress")
        page.wait_for_timeout(100)
    assert status.text_content().strip() == "succeeded"
    assert page.evaluate("window.__sameDocument") is True
    assert any(0 < p < 100 for p in seen), seen
    assert seen == sorted(seen)
    page.locator("[data-testid=confusion]").wait_for()
    assert page.locator("[data-testid=model-progress]").inner_text() == "100%"
    model = IntentModel.objects.get(dataset__name="small", number=1)
    assert page.locator("[data-testid=accuracy]").inner_text() == f"{model.accuracy:.4f}"
    matrix = page.locator("[data-testid=confusion] tbody tr")
    assert matrix.count() == len(LABELS)
    diagonal = [int(matrix.nth(i).locator("td.cell").nth(i).inner_text()) for i in range(len(LABELS))]
    assert sum(diagonal) == round(model.accuracy * model.evaluation["held_out"])
    shot(page, "23-intents-evaluation")

    # Publish to staging; the form names each pool's floor.
    assert "staging — floor 0.92" in page.locator("#publish-form select[name=pool]").inner_text()
    page.once("dialog", lambda dialog: dialog.accept())
    page.select_option("#publish-form select[name=pool]", "staging")
    page.fill("#publish-form textarea[name=reason]", "small model for the demo")
    page.click("#publish-form button[type=submit]")
    page.get_by_text("Published small #1 to staging").wait_for()
    assert IntentModelRelease.objects.get(pool__name="staging", is_active=True).intent_model == model
    assert AuditEntry.objects.filter(action="intent_model.publish", actor_name="sre").count() == 1
    shot(page, "24-intents-published")
