"""Uploading warmup messages: every bad row is named by row and field, nothing is stored on error, duplicates go."""

import hashlib
import json

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.datasets import warmup_uploads
from controlplane.datasets.exceptions import DatasetInvalid
from controlplane.datasets.models import WarmupDataset, WarmupDatasetVersion
from controlplane.datasets.services.warmup import warmup_dataset_create
from controlplane.datasets.warmup_uploads import query_key
from controlplane.lib.errors import Conflict, InvalidField
from controlplane.params.schema import INTENT_LABELS
from tests.datasets.warmup_data import MESSAGES, messages_csv, messages_jsonl

pytestmark = pytest.mark.django_db


def create(actor, content, fmt="csv", name="faq"):
    return warmup_dataset_create(actor=actor, name=name, content=content, fmt=fmt)


def refused(actor, content, fmt="csv") -> list[str]:
    """An upload that must be refused: returns the reported problems, after checking nothing was stored."""
    audit_before = AuditEntry.objects.count()
    with pytest.raises(DatasetInvalid) as caught:
        create(actor, content, fmt)
    assert not WarmupDataset.objects.exists()
    assert not WarmupDatasetVersion.objects.exists()
    assert AuditEntry.objects.count() == audit_before
    return [str(error) for error in caught.value.errors]


def test_csv_upload_stores_canonical_messages_counts_and_their_sha256(agent):
    dataset = create(agent, messages_csv(MESSAGES))
    version = WarmupDatasetVersion.objects.get(dataset=dataset)
    assert (dataset.latest_number, version.number, version.base_number) == (1, 1, None)
    assert version.messages == MESSAGES
    # Absent fields are left out rather than stored empty, and keys are sorted: one canonical text per content.
    assert version.messages_json.startswith('[{"intent":"order_status","text":"我的订单到哪了？"},')
    assert version.sha256 == hashlib.sha256(version.messages_json.encode("utf-8")).hexdigest()
    assert (version.source, version.source_format, version.message_count) == ("upload", "csv", 5)
    assert version.derived_from is None
    assert version.intent_counts == {
        **dict.fromkeys(INTENT_LABELS, 0),
        "order_status": 1,
        "coupon_promotion": 1,
        "return_refund": 1,
        "legal_policy": 1,
        "none": 1,
    }
    entry = AuditEntry.objects.get(action="warmup_dataset.create")
    assert (entry.actor_name, entry.after["messages"], entry.after["sha256"]) == ("agent", 5, version.sha256)


def test_csv_and_jsonl_of_the_same_messages_give_the_same_sha256(agent):
    a = create(agent, messages_csv(MESSAGES), name="a").versions.get()
    b = create(agent, messages_jsonl(MESSAGES), fmt="jsonl", name="b").versions.get()
    assert a.sha256 == b.sha256
    assert b.source_format == "jsonl"


def test_a_csv_header_of_text_alone_is_enough_and_a_bom_is_skipped(agent):
    version = create(agent, "\ufefftext\nhello\n你好\n".encode()).versions.get()
    assert version.messages == [{"text": "hello"}, {"text": "你好"}]
    assert version.intent_counts["none"] == 2


def test_duplicates_by_normalised_text_are_removed_and_counted(agent):
    rows = [
        {"text": "Where is my order?", "intent": "order_status"},
        {"text": "where is my order", "intent": "order_status"},
        {"text": "  WHERE   is my order？？ ", "intent": "order_status"},
        {"text": "ｗｈｅｒｅ ｉｓ ｍｙ ｏｒｄｅｒ", "intent": "order_status"},  # full-width: NFKC makes it ASCII
        {"text": "where is my order, really", "intent": "order_status"},  # inner punctuation counts
    ]
    version = create(agent, messages_csv(rows)).versions.get()
    assert version.duplicates_removed == 3
    assert [m["text"] for m in version.messages] == ["Where is my order?", "where is my order, really"]
    assert AuditEntry.objects.get(action="warmup_dataset.create").after["duplicates_removed"] == 3


def test_the_same_text_with_another_intent_or_tag_is_an_error_naming_both_rows(agent):
    rows = [
        {"text": "这个条款什么意思", "intent": "legal_policy", "business_tag": "legal"},
        {"text": "这个条款什么意思？", "intent": "other", "business_tag": "legal"},
        {"text": "这个条款什么意思", "intent": "legal_policy"},
    ]
    assert refused(agent, messages_csv(rows)) == [
        "row 3: intent: 'other', but the same text on row 2 has 'legal_policy'",
        "row 4: business_tag: '', but the same text on row 2 has 'legal'",
    ]


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({"text": "   "}, "text: must not be empty"),
        ({"text": "？！。"}, "text: holds nothing but punctuation"),
        ({"text": "x" * 4001}, "text: 4001 characters is longer than the limit of 4000"),
        ({"text": "hi", "intent": "shipping"}, "intent: unknown intent 'shipping'; expected one of order_status,"),
        ({"text": "hi", "business_tag": "has space"}, "business_tag: must be 1-64 letters, digits or _.:- starting"),
        ({"text": "hi", "business_tag": "-leading"}, "business_tag: must be 1-64 letters"),
        ({"text": "hi", "business_tag": "t" * 65}, "business_tag: must be 1-64 letters"),
        ({"text": "hi", "business_tag": "标签"}, "business_tag: must be 1-64 letters"),
    ],
    ids=["blank-text", "punctuation-only", "long-text", "unknown-intent", "tag-space", "tag-dash", "tag-65", "tag-cjk"],
)
def test_each_bad_row_is_named_by_row_and_field(agent, bad, problem):
    rows = [*MESSAGES]
    rows.insert(2, bad)  # row 1 is the header, so the third data row is row 4
    problems = refused(agent, messages_csv(rows))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"row 4: {problem}")


def test_limits_accept_what_they_name(agent):
    rows = [
        {"text": "y" * 4000},
        {"text": "tagged", "business_tag": "A" + "z" * 63},
        {"text": "tag punctuation", "business_tag": "promo:11.11_vip-a"},
    ]
    assert create(agent, messages_csv(rows)).versions.get().message_count == 3


def test_one_row_with_several_problems_reports_each(agent):
    problems = refused(agent, messages_csv([{"text": "", "intent": "nope", "business_tag": "a b"}]))
    assert [p.split(":")[0] + ":" + p.split(":")[1] for p in problems] == [
        "row 2: text",
        "row 2: intent",
        "row 2: business_tag",
    ]


def test_csv_header_and_field_count_errors(agent):
    assert refused(agent, b"message,label\nhi,other\n") == [
        "header: unknown column 'message'; expected text (optionally intent, business_tag)",
        "header: unknown column 'label'; expected text (optionally intent, business_tag)",
        "header: missing column 'text'; the first line must be text",
    ]
    assert refused(agent, b"text,text\nhi,hi\n") == ["header: column 'text' appears twice"]
    assert refused(agent, b"text,intent\nhi,other,extra\n") == [
        "row 2: columns: expected 2 fields (text,intent), got 3"
    ]


def test_jsonl_errors_name_the_line_and_unknown_fields_are_refused(agent):
    lines = messages_jsonl(MESSAGES).decode().splitlines()
    lines[0] = '{"text": "hi"'  # truncated
    lines[1] = '["hi"]'
    lines[2] = '{"text": 5}'
    lines[3] = '{"text": "hi there", "count": 3}'
    lines.append('{"text": "ok", "intent": 7}')
    problems = refused(agent, "\n".join(lines), fmt="jsonl")
    assert problems[0].startswith("row 1: json: not valid JSON")
    assert problems[1:] == [
        'row 2: json: expected an object like {"text": ...}',
        "row 3: text: must be a string, got int",
        "row 4: count: unknown field; expected text (optionally intent, business_tag)",
        "row 6: intent: must be a string, got int",
    ]


def test_errors_stop_at_50_and_count_the_rest(agent):
    rows = [*MESSAGES, *({"text": f"message {i}", "intent": "nope"} for i in range(70))]
    with pytest.raises(DatasetInvalid) as caught:
        create(agent, messages_csv(rows))
    assert len(caught.value.errors) == 50
    assert caught.value.more == 20
    assert caught.value.detail["more"] == 20
    assert "70 problems" in caught.value.message
    assert str(caught.value.errors[0]).startswith("row 7: intent: unknown intent 'nope'")
    assert not WarmupDataset.objects.exists()


def test_file_level_limits(agent, monkeypatch):
    assert refused(agent, b"\xff\xfetext\n") == ["content: not UTF-8 text (invalid byte at offset 0)"]
    assert refused(agent, b"text\n") == ["content: no rows"]
    assert refused(agent, b"") == ["content: no rows"]
    assert refused(agent, b"text\nhi\n", fmt="xlsx") == ["format: must be one of csv, jsonl, got 'xlsx'"]
    monkeypatch.setattr(warmup_uploads, "MAX_ROWS", 3)
    assert refused_named(agent, messages_csv(MESSAGES))[0] == "content: more than 3 rows"
    monkeypatch.setattr(warmup_uploads, "MAX_BYTES", 100)
    problem = refused_named(agent, messages_csv(MESSAGES))[0]
    assert problem.startswith("content: ") and "bytes is over the limit of 100 bytes" in problem


def refused_named(actor, content) -> list[str]:
    with pytest.raises(DatasetInvalid) as caught:
        create(actor, content, name="limits")
    assert not WarmupDataset.objects.filter(name="limits").exists()
    return [str(error) for error in caught.value.errors]


def test_the_real_limits_are_the_documented_ones():
    assert (warmup_uploads.MAX_ROWS, warmup_uploads.MAX_BYTES, warmup_uploads.MAX_TEXT_CHARS) == (
        50_000,
        20 * 1024 * 1024,
        4000,
    )


def test_name_rules_and_duplicate_names(agent):
    content = messages_csv(MESSAGES)
    with pytest.raises(InvalidField, match="name: must be 1-64 lowercase"):
        create(agent, content, name="Bad Name")
    create(agent, content)
    with pytest.raises(Conflict, match="already exists"):
        create(agent, content)
    assert WarmupDataset.objects.count() == 1


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("Where is my order?", "where is my order"),
        ("  where\tis  my\norder ", "where is my order"),
        ("ＷＨＥＲＥ　ｉｓ　ｍｙ　ｏｒｄｅｒ！", "where is my order"),
        ("我的订单到哪了？？", "我的订单到哪了"),
        ("好的谢谢～", "好的谢谢"),
        ("wait... what?!", "wait... what"),
        ("订单 DD20241111887766 到哪了。", "订单 dd20241111887766 到哪了"),
        ("？！", ""),
    ],
)
def test_query_key_normalises_width_case_spaces_and_trailing_punctuation(text, key):
    assert query_key(text) == key


def test_versions_are_immutable(agent):
    version = create(agent, messages_csv(MESSAGES)).versions.get()
    version.comment = "changed"
    with pytest.raises(Exception, match="immutable"):
        version.save()
    assert json.loads(WarmupDatasetVersion.objects.get().messages_json) == MESSAGES
