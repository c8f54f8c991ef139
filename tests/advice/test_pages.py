"""Suggestion pages: the pool and template pages list them, the preview shows the draft's diff, the form saves it."""

import pytest
from django.test import Client

from controlplane.accounts.models import User
from controlplane.params.models import TemplateVersion
from tests.advice.builders import running, versions_of, window_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def staging(agent, sre):
    _, (v1,) = versions_of(agent, [16])
    pool = running(sre, v1)
    window_rows(pool.name, batch_idle_ratio=0.22, batch_size_hist={"3": 9, "6": 1}, long_request_share=0.07)
    return pool


def client_for(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def test_pool_and_template_pages_list_the_suggestions(users, staging):
    page = client_for("oncall").get("/pools/staging/").content.decode()
    assert 'data-suggestion="batch-idle"' in page and 'data-suggestion="long-requests"' in page
    assert "Batches run idle 22% of the time" in page and "suggestion-open" not in page  # on-call: no button
    page = client_for("agent").get("/templates/chat/").content.decode()
    assert 'data-suggestion="batch-idle" data-pool="staging"' in page
    assert 'href="/pools/staging/suggestions/batch-idle/"' in page


def test_preview_shows_the_diff_and_the_form_saves_a_draft(users, staging):
    client = client_for("agent")
    page = client.get("/pools/staging/suggestions/batch-idle/").content.decode()
    assert '<tr data-path="batch.max_size">' in page and "Save as draft version v2" in page
    response = client.post("/pools/staging/suggestions/batch-idle/", {"base_version": "1", "comment": "peak over"})
    assert response.status_code == 302 and response["Location"] == "/templates/chat/v2/"
    draft = TemplateVersion.objects.get(template__name="chat", number=2)
    assert draft.params["batch"]["max_size"] == 3 and draft.comment.endswith("peak over")


def test_a_stale_base_from_the_preview_is_409_and_saves_nothing(users, staging):
    client = client_for("agent")
    assert client.post("/pools/staging/suggestions/batch-idle/", {"base_version": "1"}).status_code == 302
    response = client.post("/pools/staging/suggestions/long-requests/", {"base_version": "1"})
    assert response.status_code == 409 and "stale" in response.content.decode()
    assert TemplateVersion.objects.filter(template__name="chat").count() == 2


def test_oncall_reads_the_preview_without_a_form(users, staging):
    page = client_for("oncall").get("/pools/staging/suggestions/batch-idle/").content.decode()
    assert 'id="open-draft"' not in page and "opening a draft version needs agent" in page


def test_gone_or_advice_only_suggestions_open_no_preview(users, agent, sre, staging):
    assert client_for("agent").get("/pools/staging/suggestions/spec-rejection/").status_code == 404
    _, (v1,) = versions_of(agent, [2], name="tiny")  # max_size 2 is batch.min_size: batch-idle is advice only
    running(sre, v1, name="tiny-pool")
    window_rows("tiny-pool", batch_idle_ratio=0.5)
    response = client_for("agent").get("/pools/tiny-pool/suggestions/batch-idle/")
    assert response.status_code == 400 and "advice only" in response.content.decode()
