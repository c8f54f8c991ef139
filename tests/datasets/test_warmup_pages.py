"""The warmup pages: what a dataset page shows, and how refusals (bad rows, stale base, a repeated assignment) read."""

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from controlplane.datasets.models import WarmupDataset
from controlplane.datasets.services.warmup import pool_warmup_assign, warmup_dataset_create, warmup_version_create
from tests.datasets.warmup_data import MESSAGES, conversation_lines, messages_csv
from tests.factories import pools

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def faq(agent):
    return warmup_dataset_create(actor=agent, name="faq", content=messages_csv(MESSAGES), fmt="csv")


def text_of(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def test_the_dataset_page_previews_the_first_50_messages_with_counts_per_intent(agent, oncall):
    rows = [{"text": f"question number {i}", "intent": "order_status"} for i in range(55)]
    rows += [{"text": "这个条款什么意思", "business_tag": "legal"}]
    warmup_dataset_create(actor=agent, name="many", content=messages_csv(rows), fmt="csv")
    response = client_for(oncall).get(reverse("dashboard:warmup-dataset", args=["many"]))
    assert response.status_code == 200
    body = response.content.decode()
    preview = body.split('data-testid="preview"')[1].split("</table>")[0]
    assert preview.count("<tr>") == 1 + 50  # the header row, then 50 messages
    assert "First 50 of 56 messages" in text_of(response)
    counts = body.split('data-testid="intent-counts"')[1].split("</table>")[0]
    assert re.search(r'data-intent="order_status">.*?<td class="count">55</td>', counts)
    assert re.search(r'data-intent="none">.*?no intent given.*?<td class="count">1</td>', counts)
    # oncall reads, but neither uploads nor assigns.
    assert 'id="warmup-version-form"' not in body and 'id="assign-form"' not in body


def test_a_log_derived_version_says_what_was_read(sre, faq):
    warmup_version_create(
        actor=sre,
        dataset=faq,
        base_number=1,
        content=conversation_lines(),
        fmt="jsonl",
        source="conversation_log",
        top_n=4,
        comment="festival log",
    )
    response = client_for(sre).get(reverse("dashboard:warmup-version", args=["faq", 2]))
    # The next version is offered the way this one came: from a log.
    assert 'value="conversation_log" checked' in response.content.decode()
    page = text_of(response)
    assert "the top 4 user queries of a conversation log (JSONL)" in page
    assert "read 8 rows, 8 conversations, 13 user messages, 6 distinct queries" in page
    assert "the 4 kept cover 11 of the user messages" in page
    assert "made from v1" in page and "“festival log”" in page
    assert "我的订单到哪了？ — — 4" in page  # text, intent, tag, count


def test_a_bad_upload_lists_the_first_50_problems_and_counts_the_rest(agent):
    rows = [{"text": f"message {i}", "intent": "nope"} for i in range(53)]
    upload = SimpleUploadedFile("warmup.csv", messages_csv(rows))
    response = client_for(agent).post(reverse("dashboard:warmup"), {"name": "bad", "source": "upload", "file": upload})
    assert response.status_code == 400
    errors = response.content.decode().split('data-testid="upload-errors"')[1].split("</div>")[0]
    assert errors.count("<li>row ") == 50
    assert "row 2: intent: unknown intent &#x27;nope&#x27;" in errors
    assert "<li>and 3 more</li>" in errors
    assert not WarmupDataset.objects.exists()


def test_saving_on_a_stale_base_says_so_and_stores_nothing(agent, sre, faq):
    warmup_version_create(actor=sre, dataset=faq, base_number=1, content=messages_csv(MESSAGES[:2]), fmt="csv")
    upload = SimpleUploadedFile("warmup.csv", messages_csv(MESSAGES[:3]))
    response = client_for(agent).post(
        reverse("dashboard:warmup-dataset", args=["faq"]), {"base_version": 1, "source": "upload", "file": upload}
    )
    assert response.status_code == 409
    assert "Someone saved a newer version first: base_version: version 1 is stale; the latest is 2" in text_of(response)
    assert faq.versions.count() == 2
    assert 'name="base_version" value="2"' in response.content.decode()


def test_the_assign_form_shows_each_pool_s_current_warmup_and_refuses_a_repeat(sre, faq):
    staging, _ = pools(sre)
    pool_warmup_assign(actor=sre, pool=staging, version=faq.versions.get(), reason="first")
    client = client_for(sre)
    page = client.get(reverse("dashboard:warmup-dataset", args=["faq"])).content.decode()
    form = page.split('id="assign-form"')[1].split("</form>")[0]
    assert "prod-main — now: none" in form and "staging — now: faq v1" in form
    response = client.post(
        reverse("dashboard:warmup-assign", args=["faq"]), {"pool": "staging", "version": 1, "reason": "again"}
    )
    assert response.status_code == 400
    assert "pool staging already warms up with faq v1" in text_of(response)
    overview = text_of(client.get(reverse("dashboard:warmup")))
    assert "staging faq v1 5 messages sre" in overview


def test_unknown_datasets_and_versions_are_404_pages(oncall, faq):
    client = client_for(oncall)
    assert client.get(reverse("dashboard:warmup-dataset", args=["nope"])).status_code == 404
    response = client.get(reverse("dashboard:warmup-version", args=["faq", 9]))
    assert response.status_code == 404
    assert "warmup dataset faq has no version 9" in response.content.decode()
