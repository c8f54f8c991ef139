"""The intents REST API: upload (multipart or JSON), dataset detail, training that returns at once, publish."""

import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from controlplane.audit.models import AuditEntry
from controlplane.datasets.models import IntentDataset, IntentModel, IntentModelRelease
from controlplane.datasets.services.training import intent_model_train
from engine_node.policy.dataset import LABELS
from tests.datasets.data import as_csv, as_jsonl, easy_rows
from tests.datasets.factories import train_now
from tests.factories import pools

pytestmark = pytest.mark.django_db


def test_multipart_upload_takes_the_format_from_the_file_name(api_for):
    upload = SimpleUploadedFile("intents.csv", as_csv(easy_rows(), bom=True), content_type="text/csv")
    response = api_for("agent").post(
        reverse("api:intent-dataset-list"), {"name": "easy", "file": upload}, format="multipart"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["name"], body["source_format"], body["row_count"]) == ("easy", "csv", len(easy_rows()))
    assert set(body["label_counts"]) == set(LABELS)


def test_json_upload_and_detail_with_counts_and_preview(api_for):
    rows = easy_rows()
    client = api_for("sre")
    body = {"name": "easy", "format": "jsonl", "content": as_jsonl(rows).decode(), "description": "first try"}
    assert client.post(reverse("api:intent-dataset-list"), body, format="json").status_code == 201
    detail = client.get(reverse("api:intent-dataset-detail", args=["easy"])).json()
    assert detail["description"] == "first try"
    assert detail["label_counts"]["order_status"] == sum(r["label"] == "order_status" for r in rows)
    assert len(detail["preview"]) == 20
    assert detail["preview"][0] == {"text": rows[0]["text"], "label": rows[0]["label"], "lang": "", "template": ""}
    listed = client.get(reverse("api:intent-dataset-list")).json()["results"]
    assert [d["name"] for d in listed] == ["easy"] and "preview" not in listed[0]


def test_a_bad_upload_is_a_400_listing_rows_and_fields_and_stores_nothing(api_for):
    rows = [*easy_rows(), {"text": "", "label": "order_status"}, {"text": "hello", "label": "greeting"}]
    response = api_for("agent").post(
        reverse("api:intent-dataset-list"),
        {"name": "bad", "format": "csv", "content": as_csv(rows).decode()},
        format="json",
    )
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "dataset_invalid"
    n = len(rows)
    assert [e["text"] for e in body["detail"]["errors"]] == [
        f"row {n}: text: must not be empty",
        f"row {n + 1}: label: unknown label 'greeting'; expected one of " + ", ".join(LABELS),
    ]
    assert body["detail"]["errors"][0] | {"text": None} == {
        "row": n,
        "field": "text",
        "message": "must not be empty",
        "text": None,
    }
    assert body["detail"]["more"] == 0
    assert body["error"].startswith("dataset refused, nothing stored: 2 problems; first: row")
    assert not IntentDataset.objects.exists()
    assert not AuditEntry.objects.filter(action="intent_dataset.create").exists()


def test_a_json_body_over_the_request_limit_is_a_413_pointing_to_multipart(api_for, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    content = as_csv(easy_rows()).decode()
    response = api_for("agent").post(
        reverse("api:intent-dataset-list"), {"name": "big", "format": "csv", "content": content}, format="json"
    )
    assert response.status_code == 413
    error = response.json()["error"]
    assert error.startswith("content: ")
    assert error.endswith("over the limit of 10000 bytes (0.00953674 MiB); send a larger dataset as a multipart `file`")
    upload = SimpleUploadedFile("big.csv", content.encode())
    multipart = api_for("agent").post(reverse("api:intent-dataset-list"), {"name": "big", "file": upload})
    assert multipart.status_code == 201
    assert IntentDataset.objects.get().name == "big"


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"name": "x", "format": "csv"}, "content"),
        ({"name": "x", "content": "text,label\n"}, "format"),
        ({"name": "x", "format": "tsv", "content": "a"}, "format"),
        ({"name": "x", "format": "csv", "content": "a", "rows": 3}, "rows"),
    ],
)
def test_malformed_create_requests_name_the_field(api_for, body, path):
    response = api_for("agent").post(reverse("api:intent-dataset-list"), body, format="json")
    assert response.status_code == 400
    assert path in response.json()["detail"]


def test_train_publish_and_revert_through_the_api(api_for, users, easy_dataset):
    pools(users["sre"])
    client = api_for("agent")
    response = client.post(reverse("api:intent-model-list", args=["easy"]), {"epochs": 2}, format="json")
    assert response.status_code == 201
    assert (response.json()["number"], response.json()["status"]) == (1, "queued")
    # Inside a test transaction nothing is dispatched; run the queued model as a worker would.
    intent_model_train(model_id=response.json()["id"])
    detail = client.get(reverse("api:intent-model-detail", args=["easy", 1])).json()
    assert (detail["status"], detail["progress"]) == ("succeeded", 100)
    assert detail["evaluation"]["accuracy"] == detail["accuracy"]
    assert len(detail["evaluation"]["confusion"]) == len(LABELS)
    assert "document_text" not in detail

    publish = {"pool": "staging", "dataset": "easy", "number": 1, "reason": "better"}
    assert client.post(reverse("api:intent-release-list"), publish, format="json").status_code == 403
    sre = api_for("sre")
    response = sre.post(reverse("api:intent-release-list"), publish, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["intent_model"]["sha256"] == detail["sha256"]
    response = sre.post(reverse("api:intent-release-list"), {"pool": "staging", "reason": "revert"}, format="json")
    assert response.status_code == 201 and response.json()["intent_model"] is None
    timeline = sre.get(reverse("api:intent-release-list"), {"pool": "staging"}).json()["results"]
    assert [(r["intent_model"] and r["intent_model"]["number"], r["is_active"]) for r in timeline] == [
        (None, True),
        (1, False),
    ]


def test_publish_below_the_floor_is_a_409_naming_accuracy_and_floor(api_for, users, agent, hard_dataset):
    pools(users["sre"])
    model = train_now(agent, hard_dataset, epochs=2)
    response = api_for("admin").post(
        reverse("api:intent-release-list"),
        {"pool": "prod-main", "dataset": "hard", "number": 1, "reason": "ship it"},
        format="json",
    )
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "accuracy_below_floor"
    assert body["error"].startswith(f"accuracy: hard #1 scored {model.accuracy:.4f}")
    assert body["detail"]["floor"] == 0.92
    assert not IntentModelRelease.objects.exists()


def test_unknown_names_are_404s(api_for, users):
    client = api_for("sre")
    assert client.get(reverse("api:intent-dataset-detail", args=["nope"])).status_code == 404
    assert client.get(reverse("api:intent-model-detail", args=["nope", 1])).status_code == 404
    response = client.post(reverse("api:intent-release-list"), {"pool": "nope", "reason": "x"}, format="json")
    assert (response.status_code, response.json()["error"]) == (404, "pool: no pool named 'nope'")


@pytest.mark.django_db(transaction=True)
def test_training_runs_after_the_response_in_embedded_mode(api_for, users, easy_dataset):
    """The request that queues a training returns before the training has done its work, which then completes."""
    response = api_for("agent").post(reverse("api:intent-model-list", args=["easy"]), {"epochs": 40}, format="json")
    assert response.status_code == 201
    model = IntentModel.objects.get(pk=response.json()["id"])
    assert model.status in ("queued", "training") and model.progress < 100
    deadline = time.monotonic() + 120
    while not model.is_finished and time.monotonic() < deadline:
        time.sleep(0.1)
        model.refresh_from_db()
    assert model.status == "succeeded", model.error
    assert model.finished_at > model.created_at
