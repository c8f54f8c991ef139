"""Deriving a warmup dataset from a conversation log: the top-N user queries with their counts, from every log shape."""

import json
from pathlib import Path

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.datasets import conversation_logs
from controlplane.datasets.conversation_logs import derive_top_queries
from controlplane.datasets.exceptions import DatasetInvalid
from controlplane.datasets.models import WarmupDataset
from controlplane.datasets.services.warmup import warmup_dataset_create
from controlplane.lib.errors import InvalidField
from tests.datasets.warmup_data import (
    CONVERSATIONS,
    EXPECTED_TOP,
    USER_MESSAGES,
    conversation_lines,
    csv_log,
    message_lines,
)

FESTIVAL_LOG = (
    Path(__file__).resolve().parents[2] / "controlplane" / "datasets" / "fixtures" / "festival_conversations.jsonl"
)


def problems(content, fmt="jsonl", **kwargs) -> list[str]:
    with pytest.raises(DatasetInvalid) as caught:
        derive_top_queries(content, fmt, **kwargs)
    return [str(error) for error in caught.value.errors]


def test_conversation_lines_give_the_most_frequent_user_queries_with_their_counts():
    derived = derive_top_queries(conversation_lines(), "jsonl")
    # Most frequent first; each keeps its most common spelling; the 2-2 tie goes to the query asked first.
    assert derived.messages == EXPECTED_TOP
    assert derived.source == "conversation_log"
    assert derived.derived_from == {
        "format": "jsonl",
        "rows": 8,
        "conversations": 8,
        "user_messages": USER_MESSAGES,
        "distinct_queries": 6,
        "skipped_empty": 0,
        "skipped_too_long": 0,
        "top_n": 200,
        "kept": 6,
        "kept_occurrences": USER_MESSAGES,
    }
    assert derived.intent_counts["none"] == 6


def test_message_lines_and_csv_logs_give_the_same_queries_as_conversation_lines():
    by_conversation = derive_top_queries(conversation_lines(), "jsonl")
    by_message = derive_top_queries(message_lines(), "jsonl")
    by_csv = derive_top_queries(csv_log(), "csv")
    assert by_message.messages == by_csv.messages == by_conversation.messages
    assert by_message.sha256 == by_csv.sha256 == by_conversation.sha256
    assert by_message.derived_from["rows"] == sum(len(turns) for turns in CONVERSATIONS)
    assert by_message.derived_from["conversations"] == by_csv.derived_from["conversations"] == 8


def test_a_csv_log_without_conversation_ids_reads_but_cannot_count_conversations():
    derived = derive_top_queries(csv_log(with_ids=False), "csv")
    assert derived.messages == EXPECTED_TOP
    assert derived.derived_from["conversations"] is None


def test_both_line_shapes_may_be_mixed_and_integer_ids_count_once():
    lines = conversation_lines(CONVERSATIONS[:2]) + "".join(
        json.dumps({"conversation_id": 77, "role": role, "content": content}, ensure_ascii=False) + "\n"
        for role, content in [("user", "我的订单到哪了"), ("assistant", "ok"), ("user", "where is my order?")]
    )
    derived = derive_top_queries(lines, "jsonl")
    assert derived.derived_from["conversations"] == 3
    assert derived.messages == [
        {"text": "我的订单到哪了？", "count": 2},
        {"text": "Where is my order?", "count": 2},
        {"text": "定金可以退吗", "count": 1},
    ]


def test_top_n_cuts_the_ranking_and_says_how_much_it_covers():
    derived = derive_top_queries(conversation_lines(), "jsonl", top_n=3)
    assert derived.messages == EXPECTED_TOP[:3]
    assert derived.derived_from["top_n"] == 3
    assert derived.derived_from["kept"] == 3
    assert derived.derived_from["kept_occurrences"] == 4 + 3 + 2


def test_ties_follow_the_order_queries_were_first_asked_whatever_the_spelling_counts():
    log = message_lines([[("user", "b"), ("user", "a"), ("user", "A."), ("user", "B"), ("user", "c")]])
    assert derive_top_queries(log, "jsonl").messages == [
        {"text": "b", "count": 2},
        {"text": "a", "count": 2},
        {"text": "c", "count": 1},
    ]
    # Same input, same bytes: derivations are reproducible.
    assert derive_top_queries(log, "jsonl").sha256 == derive_top_queries(log, "jsonl").sha256


def test_openai_content_parts_and_null_content_are_read():
    line = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "我的订单"}, {"type": "text", "text": "到哪了"}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "t1"}]},
            {"role": "tool", "content": "shipped"},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
        ]
    }
    derived = derive_top_queries(json.dumps(line, ensure_ascii=False), "jsonl")
    assert derived.messages == [{"text": "我的订单\n到哪了", "count": 1}]
    assert derived.derived_from["user_messages"] == 2
    assert derived.derived_from["skipped_empty"] == 1


def test_user_messages_with_only_punctuation_or_over_4000_characters_are_skipped_and_counted():
    log = message_lines([[("user", "？？"), ("user", "x" * 4001), ("user", "hello")]])
    derived = derive_top_queries(log, "jsonl")
    assert derived.messages == [{"text": "hello", "count": 1}]
    assert (derived.derived_from["skipped_empty"], derived.derived_from["skipped_too_long"]) == (1, 1)


def test_malformed_lines_are_named_by_row_and_field():
    lines = [
        '{"messages": [{"role": "user", "content": "hi"}]',  # truncated
        '["user", "hi"]',
        '{"text": "hi"}',
        '{"messages": "hi"}',
        '{"messages": ["hi", {"role": "usr", "content": "hi"}, {"role": "user", "content": 5}]}',
        '{"role": "user", "content": "hi"}',
        '{"role": "user", "content": "hi", "conversation_id": true}',
        '{"role": "user", "content": "fine", "conversation_id": "c1"}',
    ]
    found = problems("\n".join(lines))
    assert found[0].startswith("row 1: json: not valid JSON")
    assert found[1:] == [
        'row 2: json: expected an object like {"messages": [{"role": ..., "content": ...}, ...]} or '
        '{"role": ..., "content": ..., "conversation_id": ...}',
        'row 3: json: expected a conversation or a message: {"messages": [{"role": ..., "content": ...}, ...]} or '
        '{"role": ..., "content": ..., "conversation_id": ...}',
        'row 4: messages: must be a list of {"role": ..., "content": ...}, got str',
        'row 5: messages[0]: must be an object {"role": ..., "content": ...}, got str',
        "row 5: messages[1].role: unknown role 'usr'; expected one of system, developer, user, assistant, tool, "
        "function",
        "row 5: messages[2].content: must be a string or a list of text parts, got int",
        "row 6: conversation_id: required on a message line (the conversation it belongs to)",
        "row 7: conversation_id: must be a string or an integer, got bool",
    ]


def test_csv_log_errors():
    assert problems("speaker,text\nuser,hi\n", "csv") == [
        "header: unknown column 'speaker'; expected role,content (optionally conversation_id)",
        "header: unknown column 'text'; expected role,content (optionally conversation_id)",
        "header: missing column 'role'; the first line must be role,content",
        "header: missing column 'content'; the first line must be role,content",
    ]
    assert problems("conversation_id,role,content\n,user,hi\nc1,customer,hi\n", "csv") == [
        "row 2: conversation_id: must not be empty (the conversation the message belongs to)",
        "row 3: role: unknown role 'customer'; expected one of system, developer, user, assistant, tool, function",
    ]


def test_a_log_without_user_queries_or_rows_is_refused():
    assert problems(message_lines([[("system", "s"), ("assistant", "hello")]])) == [
        "content: no user queries in 2 rows (only messages with role 'user' count)"
    ]
    assert problems("\n\n") == ["content: no rows"]
    assert problems("role,content\n", "csv") == ["content: no rows"]


def test_size_limit_and_top_n_bounds(monkeypatch):
    for bad in (0, 5001, "10", True, None):
        with pytest.raises(InvalidField, match="top_n: must be an integer between 1 and 5000"):
            derive_top_queries(conversation_lines(), "jsonl", top_n=bad)
    assert len(derive_top_queries(conversation_lines(), "jsonl", top_n=5000).messages) == 6
    monkeypatch.setattr(conversation_logs, "MAX_BYTES", 100)
    assert "bytes is over the limit of 100 bytes" in problems(conversation_lines())[0]


@pytest.mark.django_db
def test_a_bad_log_stores_nothing_and_a_good_one_is_version_1_with_its_summary(agent):
    bad = conversation_lines() + '{"role": "user", "content": "hi"}\n'
    with pytest.raises(DatasetInvalid, match="row 9: conversation_id"):
        warmup_dataset_create(actor=agent, name="faq", content=bad, fmt="jsonl", source="conversation_log")
    assert not WarmupDataset.objects.exists() and not AuditEntry.objects.exists()
    dataset = warmup_dataset_create(
        actor=agent, name="faq", content=conversation_lines(), fmt="jsonl", source="conversation_log", top_n=4
    )
    version = dataset.versions.get()
    assert version.messages == EXPECTED_TOP[:4]
    assert (version.message_count, version.derived_from["user_messages"]) == (4, USER_MESSAGES)
    entry = AuditEntry.objects.get(action="warmup_dataset.create")
    assert entry.after["derived_from"]["top_n"] == 4 and entry.after["source"] == "conversation_log"


@pytest.mark.django_db
def test_an_unknown_source_is_refused(agent):
    with pytest.raises(InvalidField, match="source: must be one of upload, conversation_log"):
        warmup_dataset_create(actor=agent, name="faq", content="text\nhi\n", fmt="csv", source="scrape")


def test_the_bundled_festival_log_has_a_long_tail_for_top_n_to_cut():
    derived = derive_top_queries(FESTIVAL_LOG.read_bytes(), "jsonl", top_n=100)
    summary = derived.derived_from
    assert summary["rows"] == summary["conversations"] == 300
    assert summary["distinct_queries"] > summary["kept"] == 100
    counts = [message["count"] for message in derived.messages]
    assert counts == sorted(counts, reverse=True) and counts[0] >= 20 and counts[-1] >= 1
    assert any("订单" in message["text"] for message in derived.messages[:3])
    assert any(message["text"].isascii() for message in derived.messages[:10])
