"""Attacks on suggestions: a client that tries to smuggle its own change into a draft, hostile ids in URLs and bodies,
a role below agent opening a draft from the page, hostile figures in the stored rows, hostile impact records."""

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.accounts.models import User
from controlplane.impact.models import ImpactFieldChange, ImpactRecord
from controlplane.impact.services import impact_record_change
from controlplane.params.models import TemplateVersion
from tests.advice.builders import running, versions_of, window_rows
from tests.helpers import state_snapshot

pytestmark = pytest.mark.django_db
SCRIPT = "<script>alert(1)</script>"


@pytest.fixture
def staging(agent, sre):
    _, (v1,) = versions_of(agent, [16])
    pool = running(sre, v1)
    window_rows(pool.name, batch_idle_ratio=0.3)
    return pool


def apply(client, body):
    return client.post(reverse("api:pool-suggestion-apply", kwargs={"name": "staging"}), body, format="json")


def test_the_draft_carries_the_suggestion_change_and_nothing_the_client_sends(api_for, staging):
    before = state_snapshot()
    smuggled = {"suggestion": "batch-idle", "changes": [{"path": "engine.max_model_len", "to": 1}]}
    response = apply(api_for("agent"), smuggled)
    assert response.status_code == 400 and "changes" in response.json()["error"]
    response = apply(api_for("agent"), {"suggestion": "batch-idle", "document": {"engine": {"quantization": "fp8"}}})
    assert response.status_code == 400 and "document" in response.json()["error"]
    assert state_snapshot() == before
    assert apply(api_for("agent"), {"suggestion": "batch-idle"}).status_code == 201
    draft = TemplateVersion.objects.get(template__name="chat", number=2)
    assert draft.params == {"batch": {"max_size": 12}, "max_tokens": {"whitelist": []}}


@pytest.mark.parametrize("hostile", [SCRIPT, "../../admin", "batch-idle\x00", "x" * 201, ""])
def test_hostile_suggestion_ids_are_refused_and_never_echoed_raw(api_for, staging, hostile):
    before = state_snapshot()
    response = apply(api_for("agent"), {"suggestion": hostile})
    assert response.status_code in (400, 404)
    assert SCRIPT not in response.content.decode()  # JSON, but never a raw tag a careless client could render
    assert state_snapshot() == before


def test_a_hostile_id_in_the_page_url_is_escaped(users, staging):
    client = Client()
    client.force_login(users["agent"])
    response = client.get(f"/pools/staging/suggestions/{SCRIPT}/")
    assert response.status_code == 404
    assert SCRIPT.encode() not in response.content


def test_oncall_cannot_open_a_draft_from_the_page(users, staging):
    client = Client()
    client.force_login(User.objects.get(username="oncall"))
    before = state_snapshot()
    response = client.post("/pools/staging/suggestions/batch-idle/", {"base_version": "1"})
    assert response.status_code == 403
    assert state_snapshot() == before


def test_a_comment_past_its_bound_is_refused(api_for, staging):
    response = apply(api_for("agent"), {"suggestion": "batch-idle", "comment": "x" * 501})
    assert response.status_code == 400 and "comment" in response.json()["error"]


def test_hostile_stored_figures_neither_crash_nor_suggest(api_for, agent, sre):
    _, (v1,) = versions_of(agent, [16], name="odd")
    pool = running(sre, v1, name="odd-pool")
    window_rows(
        pool.name,
        batch_idle_ratio="0.9",  # a string is not a figure
        long_request_share=True,  # nor is a bool
        spec_rejection_rate=[0.9],
        latency_p99_s=1e308,
        kv_cache_usage={"a": 1},
        batch_size_hist={"-1": 5, "abc": 2, "3": "x", "999999": 1},
        length_hist=["gt2k"],
        nodes="many",
    )
    response = api_for("oncall").get(reverse("api:pool-suggestions", kwargs={"name": "odd-pool"}))
    assert response.status_code == 200 and response.json()["suggestions"] == []


def test_hostile_impact_records_are_skipped(api_for, staging, agent):
    v1 = staging.desired_version
    record = impact_record_change(kind="publish", pool=staging, actor=agent, version_before=v1, version_after=v1)
    ImpactRecord.objects.filter(pk=record.pk).update(
        status="measured", outcome="improved", before={"qps": {"median": 10.0}}
    )
    for path, old, new in [
        ("engine.tokenizer", "a", "b"),  # a field templates no longer hold
        ("batch", {"max_size": 1}, {"max_size": 2}),  # not a leaf
        ("max_tokens.whitelist", [], ["legal"]),  # a list: not moved by a suggestion
        ("batch.max_size", 16, SCRIPT),  # a value the schema would refuse
    ]:
        ImpactFieldChange.objects.create(record=record, path=path, old=old, new=new, apply="hot")
    body = api_for("agent").get(reverse("api:pool-suggestions", kwargs={"name": "staging"})).json()
    assert [s["id"] for s in body["suggestions"]] == ["batch-idle", "record-batch.max_size"]
    before = state_snapshot()
    response = apply(api_for("agent"), {"suggestion": "record-batch.max_size"})
    assert response.status_code == 400 and "batch.max_size" in response.json()["error"]  # the schema refuses it
    assert state_snapshot() == before
