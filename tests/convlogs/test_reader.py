"""The streaming conversation-log reader: formats, optional fields, bad lines counted and skipped, gzip."""

import gzip
import json

import pytest

from controlplane.convlogs.reader import LogReader, LogUnreadable, iter_conversations, parse_timestamp, sniff


def write(tmp_path, text: str, name="log", compress=False):
    path = tmp_path / name
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def jsonl(*objects) -> str:
    return "\n".join(json.dumps(item, ensure_ascii=False) for item in objects) + "\n"


def test_whole_conversation_lines_with_timestamps_and_usage(tmp_path):
    path = write(
        tmp_path,
        jsonl(
            {
                "conversation_id": "c1",
                "created_at": "2026-01-02T03:04:05Z",
                "messages": [
                    {"role": "user", "content": "我的订单到哪了", "tokens": 7},
                    {
                        "role": "assistant",
                        "content": "正在派送",
                        "usage": {"completion_tokens": 78, "prompt_tokens": 30},
                    },
                ],
            },
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "timestamp": 1700000000123},
        ),
    )
    first, second = list(iter_conversations(path))
    assert first.id == "c1"
    assert first.started_at == 1767323045.0
    assert [(m.role, m.text, m.tokens, m.prompt_tokens) for m in first.messages] == [
        ("user", "我的订单到哪了", 7, None),
        ("assistant", "正在派送", 78, 30),
    ]
    assert second.id == "line-2"
    assert second.started_at == pytest.approx(1700000000.123)
    assert second.messages[0].text == "hi" and second.messages[0].tokens is None


def test_message_lines_group_by_contiguous_conversation_id(tmp_path):
    path = write(
        tmp_path,
        jsonl(
            {"conversation_id": 1, "role": "user", "content": "a", "timestamp": 10},
            {"conversation_id": 1, "role": "assistant", "content": "b", "tokens": 3},
            {"conversation_id": "2", "role": "user", "content": "c"},
            {"conversation_id": 1, "role": "user", "content": "again"},
        ),
    )
    reader = LogReader(path)
    conversations = list(reader)
    assert [(c.id, len(c.messages), c.started_at) for c in conversations] == [
        ("1", 2, 10.0),
        ("2", 1, None),
        ("1", 1, None),
    ]
    assert reader.split_conversations == 1


def test_csv_with_tokens_and_timestamps(tmp_path):
    text = (
        "conversation_id,role,content,tokens,created_at\n"
        "a,user,hello,,2026-01-01T00:00:00+08:00\n"
        'a,assistant,"two\nlines",12,\n'
        "b,user,next,2,\n"
    )
    reader = LogReader(write(tmp_path, text))
    assert reader.format == "csv"
    conversations = list(reader)
    assert [(c.id, [(m.role, m.text, m.tokens) for m in c.messages]) for c in conversations] == [
        ("a", [("user", "hello", None), ("assistant", "two\nlines", 12)]),
        ("b", [("user", "next", 2)]),
    ]
    assert conversations[0].started_at == 1767196800.0
    assert not reader.errors.any


def test_bad_lines_are_counted_and_skipped_naming_line_and_field(tmp_path):
    lines = [json.dumps({"messages": [{"role": "user", "content": f"q{i}"}]}) for i in range(10)]
    lines[2] = "{not json"
    lines[5] = json.dumps({"messages": [{"role": "robot", "content": "x"}]})
    lines[7] = json.dumps({"messages": [{"role": "assistant", "content": "x", "tokens": -1}]})
    path = write(tmp_path, "\n".join(lines) + "\n")
    reader = LogReader(path)
    conversations = list(reader)
    assert len(conversations) == 7
    assert reader.errors.row_count == 3
    found = [(error.row, error.field) for error in reader.errors.row_errors]
    assert found == [(3, "json"), (6, "messages[0].role"), (8, "messages[0].tokens")]


def test_invalid_utf8_and_bad_timestamp_are_row_errors(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(
        b'{"messages": [{"role": "user", "content": "ok"}]}\n'
        b'{"messages": [{"role": "user", "content": "\xff"}]}\n'
        b'{"messages": [{"role": "user", "content": "ok"}], "created_at": "yesterday"}\n'
    )
    reader = LogReader(path)
    assert len(list(reader)) == 1
    assert [(e.row, e.field) for e in reader.errors.row_errors] == [(2, "line"), (3, "created_at")]


def test_gzip_is_recognised_by_magic_bytes(tmp_path):
    path = write(tmp_path, jsonl({"messages": [{"role": "user", "content": "hi"}]}), name="log.txt", compress=True)
    assert sniff(path.read_bytes()[:100]) == ("jsonl", "gzip")
    assert [c.messages[0].text for c in iter_conversations(path)] == ["hi"]


def test_decompressed_size_is_capped(tmp_path, settings):
    settings.CONVERSATION_LOG_MAX_DECOMPRESSED_BYTES = 10_000
    line = json.dumps({"messages": [{"role": "user", "content": "x" * 100}]}) + "\n"
    path = write(tmp_path, line * 1000, compress=True)
    with pytest.raises(LogUnreadable, match="decompressed"):
        list(iter_conversations(path))


def test_timestamps():
    assert parse_timestamp("1700000000") == 1700000000.0
    assert parse_timestamp(1700000000000) == 1700000000.0
    assert parse_timestamp("1970-01-01T00:01:00") == 60.0
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_timestamp(True)
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_timestamp(-5)
