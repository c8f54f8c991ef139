"""The warmup REST API: create from a file or a log (multipart or JSON), versions with a stale-base 409, preview,
and assignments to pools."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from controlplane.audit.models import AuditEntry
from controlplane.datasets.models import PoolWarmup, WarmupDataset, WarmupDatasetVersion
from controlplane.params.schema import INTENT_LABELS
from tests.datasets.warmup_data import EXPECTED_TOP, MESSAGES, conversation_lines, messages_csv
from tests.factories import pools

pytestmark = pytest.mark.django_db

LIST = reverse("api:warmup-dataset-list")


def create_faq(client):
    body = {"name": "faq", "format": "csv", "content": messages_csv(MESSAGES).decode(), "comment": "curated"}
    response = client.post(LIST, body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_multipart_log_upload_derives_the_top_queries(api_for):
    upload = SimpleUploadedFile("festival.jsonl", conversation_lines().encode(), content_type="application/x-ndjson")
    response = api_for("agent").post(
        LIST, {"name": "faq", "source": "conversation_log", "top_n": 3, "file": upload}, format="multipart"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["name"], body["latest_number"], body["created_by"]) == ("faq", 1, "agent")
    [version] = body["versions"]
    assert (version["source"], version["source_format"], version["message_count"]) == ("conversation_log", "jsonl", 3)
    assert version["derived_from"]["top_n"] == 3 and version["derived_from"]["conversations"] == 8
    assert body["assignments"] == []


def test_json_upload_detail_versions_and_preview(api_for):
    client = api_for("sre")
    created = create_faq(client)
    assert created["versions"][0]["comment"] == "curated"
    detail = client.get(reverse("api:warmup-version-detail", args=["faq", 1])).json()
    assert detail["preview"][1] == {
        "text": "满300减50的券怎么用",
        "intent": "coupon_promotion",
        "business_tag": "promo:1111",
        "count": None,
    }
    assert set(detail["intent_counts"]) == {*INTENT_LABELS, "none"}
    assert detail["sha256"] == WarmupDatasetVersion.objects.get().sha256
    listed = client.get(LIST).json()["results"]
    assert [d["name"] for d in listed] == ["faq"] and "versions" not in listed[0]
    versions = client.get(reverse("api:warmup-version-list", args=["faq"])).json()["results"]
    assert [v["number"] for v in versions] == [1] and "preview" not in versions[0]


def test_a_new_version_from_the_latest_base_and_a_409_from_a_stale_one(api_for):
    client = api_for("agent")
    create_faq(client)
    url = reverse("api:warmup-version-list", args=["faq"])
    body = {"base_version": 1, "source": "conversation_log", "format": "jsonl", "content": conversation_lines()}
    response = client.post(url, body, format="json")
    assert response.status_code == 201, response.content
    assert (response.json()["number"], response.json()["base_number"]) == (2, 1)
    stale = client.post(url, body, format="json")
    assert stale.status_code == 409
    assert stale.json()["code"] == "stale_base_version"
    assert stale.json()["error"] == "base_version: version 1 is stale; the latest is 2"
    assert stale.json()["detail"]["current_version"]["number"] == 2
    assert WarmupDatasetVersion.objects.count() == 2
    versions = client.get(url).json()["results"]
    assert [v["number"] for v in versions] == [2, 1]
    preview = client.get(reverse("api:warmup-version-detail", args=["faq", 2])).json()["preview"]
    assert preview == [{**message, "intent": None, "business_tag": None} for message in EXPECTED_TOP]


def test_a_bad_upload_is_a_400_listing_rows_and_fields_and_stores_nothing(api_for):
    rows = [*MESSAGES, {"text": ""}, {"text": "hi", "intent": "shipping"}]
    response = api_for("agent").post(
        LIST, {"name": "bad", "format": "csv", "content": messages_csv(rows).decode()}, format="json"
    )
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "dataset_invalid"
    assert [e["text"] for e in body["detail"]["errors"]] == [
        "row 7: text: must not be empty",
        "row 8: intent: unknown intent 'shipping'; expected one of " + ", ".join(INTENT_LABELS),
    ]
    assert body["detail"]["errors"][0] | {"text": None} == {
        "row": 7,
        "field": "text",
        "message": "must not be empty",
        "text": None,
    }
    assert body["detail"]["more"] == 0
    assert not WarmupDataset.objects.exists() and not AuditEntry.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "format": "csv", "content": "text\nhi\n", "top_n": 5}, "top_n"),
        ({"name": "x", "source": "conversation_log", "format": "jsonl", "content": "", "top_n": 5001}, "top_n"),
        ({"name": "x", "format": "csv", "content": "text\nhi\n", "source": "scrape"}, "source"),
        ({"name": "x", "content": "text\nhi\n"}, "format"),
        ({"name": "x", "format": "csv"}, "content"),
        ({"name": "x", "format": "csv", "content": "text\nhi\n", "labels": "x"}, "labels"),
    ],
    ids=["top_n-for-upload", "top_n-too-big", "unknown-source", "no-format", "no-content", "unknown-field"],
)
def test_request_fields_are_checked_before_reading_the_file(api_for, body, field):
    response = api_for("agent").post(LIST, body, format="json")
    assert response.status_code == 400
    assert field in response.json()["detail"]
    assert not WarmupDataset.objects.exists()


def test_assignments_through_the_api(api_for, sre):
    pools(sre)
    create_faq(api_for("agent"))
    url = reverse("api:warmup-assignment-list")
    body = {"pool": "staging", "dataset": "faq", "number": 1, "reason": "cold starts after the festival deploy"}
    response = api_for("sre").post(url, body, format="json")
    assert response.status_code == 201, response.content
    assert response.json() | {"id": None, "assigned_at": None} == {
        "id": None,
        "pool": "staging",
        "dataset": "faq",
        "number": 1,
        "sha256": WarmupDatasetVersion.objects.get().sha256,
        "message_count": len(MESSAGES),
        "assigned_by": "sre",
        "assigned_at": None,
        "reason": "cold starts after the festival deploy",
        "is_active": True,
    }
    again = api_for("admin").post(url, body, format="json")
    assert again.status_code == 409 and again.json()["code"] == "conflict"
    assert api_for("sre").post(url, {**body, "pool": "nope"}, format="json").status_code == 404
    assert api_for("sre").post(url, {**body, "number": 9}, format="json").status_code == 404
    assert api_for("agent").post(url, {**body, "pool": "prod-main"}, format="json").status_code == 403
    listed = api_for("oncall").get(url, {"pool": "staging"}).json()["results"]
    assert [(a["pool"], a["number"], a["is_active"]) for a in listed] == [("staging", 1, True)]
    assert api_for("oncall").get(url, {"pool": "prod-main"}).json()["results"] == []
    detail = api_for("oncall").get(reverse("api:warmup-dataset-detail", args=["faq"])).json()
    assert [a["pool"] for a in detail["assignments"]] == ["staging"]
    assert PoolWarmup.objects.count() == 1


def test_unknown_datasets_and_versions_are_404(api_for):
    client = api_for("oncall")
    assert client.get(reverse("api:warmup-dataset-detail", args=["nope"])).status_code == 404
    assert client.get(reverse("api:warmup-version-list", args=["nope"])).status_code == 404
    create_faq(api_for("agent"))
    response = client.get(reverse("api:warmup-version-detail", args=["faq", 2]))
    assert response.status_code == 404
    assert response.json()["error"] == "version: warmup dataset faq has no version 2"
