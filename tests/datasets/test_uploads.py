"""Uploading a dataset: every bad row is named by row and field, nothing is stored on error, duplicates go."""

import hashlib
import json

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.datasets import uploads
from controlplane.datasets.exceptions import DatasetInvalid
from controlplane.datasets.models import IntentDataset
from controlplane.datasets.services.datasets import intent_dataset_create
from controlplane.lib.errors import Conflict, InvalidField
from engine_node.policy.dataset import DATASET_PATH, LABELS
from tests.datasets.data import as_csv, as_jsonl, easy_rows

pytestmark = pytest.mark.django_db


def refused(actor, content, fmt="csv", name="bad") -> list[str]:
    """Upload that must be refused: returns the reported problems, after checking nothing was stored."""
    audit_before = AuditEntry.objects.count()
    with pytest.raises(DatasetInvalid) as caught:
        intent_dataset_create(actor=actor, name=name, content=content, fmt=fmt)
    assert not IntentDataset.objects.exists()
    assert AuditEntry.objects.count() == audit_before
    return [str(error) for error in caught.value.errors]


def test_csv_upload_stores_canonical_rows_counts_and_their_sha256(agent):
    rows = easy_rows()
    dataset = intent_dataset_create(actor=agent, name="easy", content=as_csv(rows, bom=True), fmt="csv")
    dataset.refresh_from_db()
    assert dataset.row_count == len(rows) == len(dataset.rows)
    assert dataset.rows[0] == [rows[0]["text"], rows[0]["label"], "", ""]
    assert dataset.label_counts == {label: sum(r["label"] == label for r in rows) for label in LABELS}
    assert dataset.sha256 == hashlib.sha256(dataset.rows_json.encode("utf-8")).hexdigest()
    assert not dataset.has_templates
    entry = AuditEntry.objects.get(action="intent_dataset.create")
    assert (entry.actor_name, entry.after["rows"], entry.after["sha256"]) == ("agent", len(rows), dataset.sha256)


def test_jsonl_upload_with_templates_is_marked_for_the_by_template_split(agent):
    text = DATASET_PATH.read_text(encoding="utf-8")
    dataset = intent_dataset_create(actor=agent, name="shop", content=text, fmt="jsonl")
    assert dataset.has_templates
    # Some shipped messages differ only in letter case; the classifier lower-cases, so they are duplicates.
    texts = [json.loads(line)["text"] for line in text.splitlines() if line.strip()]
    distinct = len({uploads.normalised(t) for t in texts})
    assert 0 < dataset.duplicates_removed == len(texts) - distinct
    assert dataset.row_count == distinct


def test_csv_and_jsonl_of_the_same_rows_give_the_same_sha256(agent):
    rows = easy_rows()
    a = intent_dataset_create(actor=agent, name="a", content=as_csv(rows), fmt="csv")
    b = intent_dataset_create(actor=agent, name="b", content=as_jsonl(rows), fmt="jsonl")
    assert a.sha256 == b.sha256


def test_duplicates_by_normalised_text_are_removed_and_counted(agent):
    rows = easy_rows()
    extra = [
        {"text": rows[0]["text"], "label": rows[0]["label"]},
        {"text": "  " + rows[1]["text"].upper() + " ", "label": rows[1]["label"]},
        {"text": rows[2]["text"].replace(" ", "   "), "label": rows[2]["label"]},
    ]
    dataset = intent_dataset_create(actor=agent, name="dups", content=as_csv(rows + extra), fmt="csv")
    assert dataset.duplicates_removed == 3
    assert dataset.row_count == len(rows)
    assert AuditEntry.objects.get(action="intent_dataset.create").after["duplicates_removed"] == 3


def test_the_same_text_with_two_labels_is_an_error_naming_both_rows(agent):
    rows = easy_rows()
    other = next(label for label in LABELS if label != rows[0]["label"])
    problems = refused(agent, as_csv([*rows, {"text": rows[0]["text"].upper(), "label": other}]))
    assert problems == [
        f"row {len(rows) + 2}: label: {other!r}, but the same text on row 2 is labelled {rows[0]['label']!r}"
    ]


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({"text": "where is my parcel", "label": "shipping"}, "label: unknown label 'shipping'; expected one of"),
        ({"text": "where is my parcel", "label": ""}, "label: required"),
        ({"text": "   ", "label": "order_status"}, "text: must not be empty"),
        ({"text": "x" * 2001, "label": "order_status"}, "text: 2001 characters is longer than the limit of 2000"),
    ],
    ids=["unknown-label", "missing-label", "blank-text", "long-text"],
)
def test_each_bad_csv_row_is_named_by_row_and_field(agent, bad, problem):
    rows = easy_rows()
    # Row 1 is the header, so the fifth data row is row 6.
    rows.insert(4, bad)
    problems = refused(agent, as_csv(rows))
    assert len(problems) == 1
    assert problems[0].startswith(f"row 6: {problem}")


def test_text_of_exactly_2000_characters_is_accepted(agent):
    rows = [*easy_rows(), {"text": "y" * 2000, "label": "other"}]
    assert intent_dataset_create(actor=agent, name="long", content=as_csv(rows), fmt="csv").row_count == len(rows)


def test_csv_with_a_wrong_field_count_and_bad_header(agent):
    body = as_csv(easy_rows()).decode() + "one,two,three\n"
    assert refused(agent, body.encode())[-1].endswith("columns: expected 2 fields (text,label), got 3")
    assert refused(agent, b"message,intent\nhi,other\n") == [
        "header: unknown column 'message'; expected text,label (optionally lang, template)",
        "header: unknown column 'intent'; expected text,label (optionally lang, template)",
        "header: missing column 'text'; the first line must be text,label",
        "header: missing column 'label'; the first line must be text,label",
    ]


def test_jsonl_errors_name_the_line(agent):
    lines = as_jsonl(easy_rows()).decode().splitlines()
    lines[0] = '{"text": "hi", "label": "other"'  # truncated
    lines[1] = '["hi", "other"]'
    lines[2] = '{"text": 5, "label": "other"}'
    lines[3] = '{"text": "hi there", "label": "other", "id": 17}'
    problems = refused(agent, "\n".join(lines), fmt="jsonl")
    assert problems[0].startswith("row 1: json: not valid JSON")
    assert problems[1:] == [
        'row 2: json: expected an object like {"text": ..., "label": ...}',
        "row 3: text: must be a string, got int",
        "row 4: id: unknown field; expected text, label (optionally lang, template)",
    ]


def test_short_labels_are_listed(agent):
    rows = [r for r in easy_rows() if r["label"] != "other"]
    rows += [{"text": f"thanks a lot number {i}", "label": "other"} for i in range(3)]
    rows = [r for r in rows if r["label"] != "legal_policy"]
    problems = refused(agent, as_csv(rows))
    assert problems == [
        "label: too few examples to train (need at least 20 of each label): legal_policy has 0, other has 3"
    ]


def test_errors_stop_at_50_and_count_the_rest(agent):
    rows = [*easy_rows(), *({"text": f"message {i}", "label": "nope"} for i in range(70))]
    with pytest.raises(DatasetInvalid) as caught:
        intent_dataset_create(actor=agent, name="many", content=as_csv(rows), fmt="csv")
    assert len(caught.value.errors) == 50
    assert caught.value.more == 20
    assert caught.value.detail["more"] == 20
    assert "70 problems" in caught.value.message
    assert not IntentDataset.objects.exists()


def test_file_level_limits(agent, monkeypatch):
    assert refused(agent, b"\xff\xfetext,label\n") == ["content: not UTF-8 text (invalid byte at offset 0)"]
    assert refused(agent, b"text,label\n") == ["content: no rows"]
    assert refused(agent, b"") == ["content: no rows"]
    assert refused(agent, b"text,label\n", fmt="xlsx") == ["format: must be one of csv, jsonl, got 'xlsx'"]
    monkeypatch.setattr(uploads, "MAX_ROWS", 100)
    assert refused(agent, as_csv(easy_rows()))[0] == "content: more than 100 rows"
    monkeypatch.setattr(uploads, "MAX_BYTES", 1000)
    assert refused(agent, as_csv(easy_rows()))[0].startswith("content: ")
    assert "bytes is over the limit of 1000 bytes" in refused(agent, as_csv(easy_rows()))[0]


def test_name_rules_and_duplicate_names(agent):
    content = as_csv(easy_rows())
    with pytest.raises(InvalidField, match="name: must be 1-64 lowercase"):
        intent_dataset_create(actor=agent, name="Bad Name", content=content, fmt="csv")
    intent_dataset_create(actor=agent, name="easy", content=content, fmt="csv")
    with pytest.raises(Conflict, match="already exists"):
        intent_dataset_create(actor=agent, name="easy", content=content, fmt="csv")
    assert IntentDataset.objects.count() == 1


def test_datasets_are_immutable(agent):
    dataset = intent_dataset_create(actor=agent, name="easy", content=as_csv(easy_rows()), fmt="csv")
    dataset.description = "changed"
    with pytest.raises(Conflict, match="immutable"):
        dataset.save()
    assert json.loads(IntentDataset.objects.get().rows_json) == dataset.rows
