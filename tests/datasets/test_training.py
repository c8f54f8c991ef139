"""Training a model on a small dataset: a model file the agent's classifier loads, honest evaluation, live progress."""

import dataclasses
import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from controlplane.asgi import application
from controlplane.audit.models import AuditEntry
from controlplane.datasets.consumers import FORBIDDEN
from controlplane.datasets.models import IntentModel
from controlplane.datasets.services.datasets import intent_dataset_create
from controlplane.datasets.services.training import intent_model_create, intent_model_train
from controlplane.lib.errors import InvalidField
from engine_node.policy.dataset import LABELS, Example, load_examples, split_by_template
from engine_node.policy.intent import IntentClassifier, IntentModelError, payload_sha256
from engine_node.policy.train_intent import evaluate
from tests.datasets.data import as_jsonl
from tests.datasets.factories import train_now

pytestmark = pytest.mark.django_db


def load_document(model: IntentModel, tmp_path) -> IntentClassifier:
    path = tmp_path / f"model-{model.pk}.json"
    path.write_text(model.document_text, encoding="utf-8")
    return IntentClassifier.load(path)


def test_a_trained_model_loads_in_the_agent_classifier_and_its_sha256_verifies(agent, easy_dataset, tmp_path):
    model = train_now(agent, easy_dataset, epochs=2)
    assert (model.status, model.progress, model.error) == ("succeeded", 100, "")
    assert model.started_at <= model.finished_at
    classifier = load_document(model, tmp_path)
    assert classifier.labels == list(LABELS)
    assert classifier.meta["sha256"] == model.sha256
    assert classifier.meta["training_set_sha256"] == easy_dataset.sha256
    assert (classifier.meta["split"], classifier.meta["epochs"]) == ("random", 2)
    document = json.loads(model.document_text)
    body = {key: value for key, value in document.items() if key != "sha256"}
    assert payload_sha256(body) == model.sha256 == document["sha256"]
    # One flipped bias and the agent refuses the file.
    document["bias"][0] += 0.5
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(IntentModelError, match="does not match its sha256"):
        IntentClassifier.load(tampered)


def test_evaluation_is_consistent_with_its_confusion_matrix(agent, easy_dataset, tmp_path):
    model = train_now(agent, easy_dataset, epochs=2)
    ev = model.evaluation
    labels, confusion = ev["labels"], ev["confusion"]
    assert labels == list(LABELS)
    assert len(confusion) == len(labels) and all(len(row) == len(labels) for row in confusion)
    total = sum(map(sum, confusion))
    assert total == ev["held_out"]
    # A fifth of each label, rounded per label.
    assert abs(total - easy_dataset.row_count / 5) <= len(labels)
    assert ev["accuracy"] == pytest.approx(sum(confusion[i][i] for i in range(len(labels))) / total)
    assert model.accuracy == ev["accuracy"]
    for i, label in enumerate(labels):
        column = sum(row[i] for row in confusion)
        scores = ev["per_label"][label]
        assert scores["support"] == sum(confusion[i])
        assert scores["recall"] == pytest.approx(confusion[i][i] / sum(confusion[i]))
        assert scores["precision"] == pytest.approx(confusion[i][i] / column if column else 0.0)
    assert ev["split"] == "random"
    assert ev["n_train"] + ev["held_out"] == easy_dataset.row_count


def test_recorded_accuracy_is_what_the_shipped_document_scores(agent, tmp_path):
    """With template info the by-template split is used, and the stored file scores exactly the recorded figure."""
    examples = load_examples()
    labels_seen = {}
    rows = []
    for example in examples:
        # Four templates per label and language keep it small while the by-template split still has work to do.
        key = (example.label, example.lang)
        names = labels_seen.setdefault(key, [])
        if example.template not in names and len(names) < 4:
            names.append(example.template)
        if example.template in names:
            rows.append(dataclasses.asdict(example))
    dataset = intent_dataset_create(actor=agent, name="templated", content=as_jsonl(rows), fmt="jsonl")
    model = train_now(agent, dataset, epochs=2)
    assert model.evaluation["split"] == "template"
    stored = [Example(*row) for row in dataset.rows]
    _, held_out = split_by_template(stored)
    assert model.evaluation["held_out"] == len(held_out)
    assert evaluate(load_document(model, tmp_path), held_out)["accuracy"] == model.accuracy


def test_a_run_that_cannot_hold_anything_out_fails_and_says_why(agent, tmp_path):
    """One template per label: the by-template split holds every message out, so nothing is left to train on."""
    rows = [
        {"text": f"{label} question number {i}", "label": label, "lang": "en", "template": f"{label}/only"}
        for label in LABELS
        for i in range(20)
    ]
    dataset = intent_dataset_create(actor=agent, name="one-template", content=as_jsonl(rows), fmt="jsonl")
    model = train_now(agent, dataset, epochs=1)
    assert model.status == "failed"
    assert model.error == "ValueError: the template split left 0 to train on and 180 to test"
    assert (model.progress_text, model.document_text, model.sha256, model.accuracy) == ("failed", "", "", None)
    assert model.finished_at is not None


def test_epochs_are_bounded(agent, easy_dataset):
    for epochs in (0, 51, "3", True):
        with pytest.raises(InvalidField, match="epochs: must be an integer between 1 and 50"):
            intent_model_create(actor=agent, dataset=easy_dataset, epochs=epochs)
    assert not IntentModel.objects.exists()


def test_models_are_numbered_per_dataset_and_creation_is_audited(agent, sre, easy_dataset, hard_dataset):
    first = intent_model_create(actor=agent, dataset=easy_dataset, epochs=1)
    second = intent_model_create(actor=sre, dataset=easy_dataset, epochs=3)
    other = intent_model_create(actor=sre, dataset=hard_dataset, epochs=1)
    assert [(m.number, m.status, m.progress) for m in (first, second, other)] == [
        (1, "queued", 0),
        (2, "queued", 0),
        (1, "queued", 0),
    ]
    entry = AuditEntry.objects.filter(action="intent_model.create").order_by("id")[1]
    assert (entry.actor_name, entry.after) == ("sre", {"dataset": "easy", "number": 2, "epochs": 3})


def test_a_model_is_trained_once_even_if_the_task_runs_twice(agent, easy_dataset):
    model = train_now(agent, easy_dataset, epochs=1)
    finished = model.finished_at
    assert intent_model_train(model_id=model.pk) is None
    assert intent_model_train(model_id=10**9) is None
    model.refresh_from_db()
    assert model.finished_at == finished


def session_headers(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    return [(b"origin", b"http://localhost"), (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]


@pytest.mark.django_db(transaction=True)
def test_progress_reaches_a_browser_socket_every_epoch(users, easy_dataset):
    oncall, agent = users["oncall"], users["agent"]
    headers = session_headers(oncall)

    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/intent-models/", headers=headers)
        connected, _ = await socket.connect()
        assert connected
        model = await database_sync_to_async(intent_model_create)(actor=agent, dataset=easy_dataset, epochs=3)
        await database_sync_to_async(intent_model_train)(model_id=model.pk)
        events = []
        while True:
            event = await socket.receive_json_from(timeout=10)
            events.append(event)
            if event["status"] in ("succeeded", "failed"):
                break
        await socket.disconnect()
        return model, events

    model, events = async_to_sync(scenario)()
    assert {e["type"] for e in events} == {"intent_model.progress"}
    assert {(e["model_id"], e["dataset"], e["number"]) for e in events} == {(model.pk, "easy", 1)}
    texts = [e["progress_text"] for e in events]
    assert [t.split(" on ")[0] for t in texts if t.startswith("training: epoch")] == [
        f"training: epoch {n}/3" for n in (1, 2, 3)
    ]
    calibrating = [t for t in texts if t.startswith("calibrating")]
    assert calibrating == [f"calibrating confidence: epoch {n}/3" for n in (1, 2, 3)]
    percents = [e["progress"] for e in events]
    assert percents == sorted(percents) and percents[-1] == 100
    last = events[-1]
    assert last["status"] == "succeeded"
    assert last["accuracy"] == IntentModel.objects.get(pk=model.pk).accuracy


@pytest.mark.django_db(transaction=True)
def test_the_progress_socket_refuses_anonymous_browsers(users):
    async def scenario():
        socket = WebsocketCommunicator(application, "/ws/intent-models/", headers=[(b"origin", b"http://localhost")])
        connected, code = await socket.connect()
        return connected, code

    assert async_to_sync(scenario)() == (False, FORBIDDEN)
