"""Deriving warmup messages from a conversation log: its N most frequent user queries, each with its count.

This is the seed's "use historical high-frequency queries to build the warmup data". A log is JSON Lines, each
line either a whole conversation `{"messages": [{"role", "content"}, ...]}` or one message
`{"role", "content", "conversation_id"}` (detected per line, so both may be mixed), or CSV with the header
`role,content` (optionally `conversation_id`). Other fields of a line (timestamps, ids) are ignored: logs come from
other systems. Only user messages count; each is masked (engine_node/policy/masking.py) before it is counted, so no
customer's phone, e-mail or card number reaches the dataset (shown to every role, pushed to nodes), and queries that
differ only in such data are one query; queries are the same when their masked `query_key` is.
"""

from collections import Counter
from dataclasses import dataclass, field

from controlplane.datasets.models import WarmupDatasetVersion
from controlplane.datasets.rows import MAX_BYTES, RecordShape, UploadErrors, csv_records, decoded_text, jsonl_objects
from controlplane.datasets.warmup_uploads import MAX_TEXT_CHARS, WarmupContent, query_key, warmup_content
from controlplane.lib.errors import InvalidField
from engine_node.policy.masking import mask

DEFAULT_TOP_N = 200
MAX_TOP_N = 5000
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
CSV_SHAPE = RecordShape(required=("role", "content"), optional=("conversation_id",))
LINE_SHAPES = (
    '{"messages": [{"role": ..., "content": ...}, ...]} or {"role": ..., "content": ..., "conversation_id": ...}'
)


@dataclass
class _Tally:
    """User queries seen so far: how often each key, its spellings, and the order keys first appeared in."""

    rows: int = 0
    conversation_lines: int = 0
    conversation_ids: set = field(default_factory=set)
    has_ids: bool = True
    user_messages: int = 0
    skipped_empty: int = 0
    skipped_too_long: int = 0
    counts: Counter = field(default_factory=Counter)
    spellings: dict = field(default_factory=dict)

    def user_query(self, text: str) -> None:
        self.user_messages += 1
        original = text.strip()
        if not query_key(original):
            self.skipped_empty += 1
        elif len(original) > MAX_TEXT_CHARS:
            self.skipped_too_long += 1
        else:
            masked = mask(original)
            key = query_key(masked)
            self.counts[key] += 1
            self.spellings.setdefault(key, Counter())[masked] += 1


def check_top_n(top_n) -> int:
    if isinstance(top_n, bool) or not isinstance(top_n, int) or not 1 <= top_n <= MAX_TOP_N:
        raise InvalidField("top_n", f"must be an integer between 1 and {MAX_TOP_N}, got {top_n!r}")
    return top_n


def derive_top_queries(content: bytes | str, fmt: str, *, top_n: int = DEFAULT_TOP_N) -> WarmupContent:
    """The `top_n` most frequent user queries, most frequent first (ties: the one the log asked first).

    Each keeps its most common original spelling as its text (ties: the spelling seen first) and carries its
    count. Any malformed line refuses the whole log, naming its row and field.
    """
    top_n = check_top_n(top_n)
    errors = UploadErrors()
    text = decoded_text(content, fmt, errors, max_bytes=MAX_BYTES)
    tally = _Tally()
    if fmt == "csv":
        _read_csv(text, errors, tally)
    else:
        _read_jsonl(text, errors, tally)
    if not tally.rows and not errors.any:
        errors.file("content", "no rows")
    elif not tally.counts and not errors.any:
        errors.file("content", f"no user queries in {tally.rows} rows (only messages with role 'user' count)")
    errors.raise_if_any()
    # Counter keeps first-insertion order, and sorted() is stable: equal counts stay in the order first asked.
    ranked = sorted(tally.counts, key=lambda key: -tally.counts[key])[:top_n]
    messages = [
        {"text": max(tally.spellings[key].items(), key=lambda item: item[1])[0], "count": tally.counts[key]}
        for key in ranked
    ]
    conversations = tally.conversation_lines + len(tally.conversation_ids) if tally.has_ids else None
    summary = {
        "format": fmt,
        "rows": tally.rows,
        "conversations": conversations,
        "user_messages": tally.user_messages,
        "distinct_queries": len(tally.counts),
        "skipped_empty": tally.skipped_empty,
        "skipped_too_long": tally.skipped_too_long,
        "top_n": top_n,
        "kept": len(messages),
        "kept_occurrences": sum(message["count"] for message in messages),
    }
    return warmup_content(
        source=WarmupDatasetVersion.Source.CONVERSATION_LOG, source_format=fmt, messages=messages, derived_from=summary
    )


def _read_jsonl(text: str, errors: UploadErrors, tally: _Tally) -> None:
    for number, line in jsonl_objects(text, errors, LINE_SHAPES):
        tally.rows += 1
        if "messages" in line:
            messages = conversation_messages(number, line["messages"], errors)
            if messages is None:
                continue
            tally.conversation_lines += 1
            for prefix, message in messages:
                _message(number, prefix, message, errors, tally)
        elif "role" in line:
            conversation_id = line_conversation_id(number, line.get("conversation_id"), errors)
            if conversation_id is not None:
                tally.conversation_ids.add(conversation_id)
            _message(number, "", line, errors, tally)
        else:
            errors.row(number, "json", f"expected a conversation or a message: {LINE_SHAPES}")


def line_conversation_id(number: int, value, errors: UploadErrors) -> str | None:
    """The conversation a message line belongs to, as a string; None (with an error naming the line) when invalid."""
    if value is None or value == "":
        errors.row(number, "conversation_id", "required on a message line (the conversation it belongs to)")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        errors.row(number, "conversation_id", f"must be a string or an integer, got {kind(value)}")
        return None
    return str(value)


def conversation_messages(number: int, messages, errors: UploadErrors) -> list[tuple[str, dict]] | None:
    """(field prefix, message object) per message of a whole-conversation line; None when `messages` is no list.

    A message that is no object is reported and left out."""
    if not isinstance(messages, list):
        errors.row(number, "messages", f'must be a list of {{"role": ..., "content": ...}}, got {kind(messages)}')
        return None
    found = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            errors.row(
                number, f"messages[{i}]", f'must be an object {{"role": ..., "content": ...}}, got {kind(message)}'
            )
            continue
        found.append((f"messages[{i}].", message))
    return found


def message_fields(number: int, prefix: str, message: dict, errors: UploadErrors) -> tuple[str, str] | None:
    """A message's role and text; None (with an error naming the line and field) when either is invalid."""
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        errors.row(number, f"{prefix}role", f"unknown role {str(role)[:30]!r}; expected one of {', '.join(ROLES)}")
        return None
    content = _content_text(message.get("content"))
    if content is None:
        errors.row(
            number,
            f"{prefix}content",
            f"must be a string or a list of text parts, got {kind(message.get('content'))}",
        )
        return None
    return role, content


def _message(number: int, prefix: str, message: dict, errors: UploadErrors, tally: _Tally) -> None:
    """Validate one message's role and content; count it when it is a user's."""
    fields = message_fields(number, prefix, message, errors)
    if fields is not None and fields[0] == "user":
        tally.user_query(fields[1])


def _content_text(content) -> str | None:
    """A message's text: a string, the text parts of an OpenAI content list joined, "" for null (a tool call)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        texts = [part.get("text") for part in content if part.get("type") == "text"]
        if all(isinstance(text, str) for text in texts):
            return "\n".join(texts)
    return None


def _read_csv(text: str, errors: UploadErrors, tally: _Tally) -> None:
    for number, record in csv_records(text, errors, CSV_SHAPE):
        tally.rows += 1
        if "conversation_id" not in record:
            tally.has_ids = False
        elif record["conversation_id"].strip():
            tally.conversation_ids.add(record["conversation_id"].strip())
        else:
            errors.row(number, "conversation_id", "must not be empty (the conversation the message belongs to)")
        record["role"] = record["role"].strip()
        _message(number, "", record, errors, tally)


def kind(value) -> str:
    return "null" if value is None else type(value).__name__
