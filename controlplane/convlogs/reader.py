"""Reading a conversation log as a stream of conversations, in bounded memory; bad lines are counted and skipped.

The line formats are the warmup datasets' (controlplane/datasets/conversation_logs.py, whose validation this reuses):
JSON Lines with a whole conversation per line `{"messages": [...]}` or one message per line with `conversation_id`,
or CSV `role,content,conversation_id`. Optional, per conversation or message: `created_at`/`timestamp` (ISO-8601,
or epoch seconds; a number above 10^12 is read as milliseconds; a time without a zone is UTC), and per message
`tokens`, or OpenAI's `usage` on an assistant message (`completion_tokens` is the reply's length, `prompt_tokens`
its prompt's). Files may be gzip-compressed (recognised by their magic bytes).

Memory stays bounded: lines are read one at a time (at most `MAX_LINE_BYTES` each), the lines of one conversation
are expected to be contiguous (a conversation id that comes back after another one starts a second conversation,
counted in `split_conversations`), and a conversation keeps at most `MAX_MESSAGES` messages.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

from controlplane.datasets.conversation_logs import (
    LINE_SHAPES,
    conversation_messages,
    kind,
    line_conversation_id,
    message_fields,
)
from controlplane.datasets.rows import MAX_NUMBER_DIGITS, RecordShape, UploadErrors, csv_records, jsonl_objects
from controlplane.lib.body_limit import BodyTooLarge

GZIP_MAGIC = b"\x1f\x8b"
MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_MESSAGES = 2000
# How many finished conversation ids are remembered to notice one that comes back (non-contiguous lines).
RECENT_IDS = 50_000
TIMESTAMP_FIELDS = ("created_at", "timestamp")
CSV_SHAPE = RecordShape(
    required=("role", "content", "conversation_id"), optional=("created_at", "timestamp", "tokens", "prompt_tokens")
)
FORMATS = ("jsonl", "csv")


@dataclass(slots=True)
class LogMessage:
    """One message: its role, text and, when the log says, its length in tokens (and, for a reply, its prompt's)."""

    role: str
    text: str
    tokens: int | None = None
    prompt_tokens: int | None = None


@dataclass(slots=True)
class LogConversation:
    """One conversation of a log: its id, when it started (epoch seconds, when the log says) and its messages."""

    id: str
    started_at: float | None
    messages: list[LogMessage] = field(default_factory=list)


class LogUnreadable(BodyTooLarge):
    """The file as a whole cannot be read: decompressed past its limit, or a broken gzip stream."""


def sniff(head: bytes) -> tuple[str, str]:
    """(format, compression) of a file from its first bytes (decompressed first when gzip's magic starts them)."""
    compression = "none"
    if head.startswith(GZIP_MAGIC):
        compression = "gzip"
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 4096)
        except zlib.error:
            head = b""
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    return ("jsonl" if text.startswith(b"{") else "csv"), compression


class _CappedStream:
    """A binary stream whose reads stop the whole file once more than `limit` bytes have come out of it."""

    def __init__(self, raw: BinaryIO, limit: int):
        self.raw = raw
        self.limit = limit
        self.count = 0

    def readline(self, size: int) -> bytes:
        try:
            line = self.raw.readline(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise LogUnreadable(f"file: not a readable gzip stream ({exc})", field="file") from None
        self.count += len(line)
        if self.count > self.limit:
            raise LogUnreadable(
                f"file: decompressed, the log is over the limit of {self.limit} bytes "
                f"({self.limit / (1 << 20):g} MiB, CONVERSATION_LOG_MAX_DECOMPRESSED_BYTES)",
                field="file",
            )
        return line


class LogReader:
    """Iterating yields the log's conversations in file order; `errors` holds the bad lines seen so far."""

    def __init__(self, source, *, fmt: str | None = None, compression: str | None = None):
        if hasattr(source, "path") and hasattr(source, "format"):
            fmt, compression, source = source.format, source.compression, source.path
        self.path = Path(source)
        if fmt is None or compression is None:
            with open(self.path, "rb") as file:
                fmt, compression = sniff(file.read(8192))
        self.format, self.compression = fmt, compression
        self.size = os.path.getsize(self.path)
        self.errors = UploadErrors()
        self.lines = 0
        self.split_conversations = 0
        self._file: BinaryIO | None = None

    @property
    def bytes_read(self) -> int:
        """How far into the stored (compressed) file reading is: for progress."""
        if self._file is None or self._file.closed:
            return self.size if self.lines else 0
        return self._file.tell()

    def __iter__(self) -> Iterator[LogConversation]:
        limit = settings.CONVERSATION_LOG_MAX_DECOMPRESSED_BYTES
        with open(self.path, "rb") as self._file:
            raw = gzip.GzipFile(fileobj=self._file) if self.compression == "gzip" else self._file
            lines = self._text_lines(_CappedStream(raw, limit))
            if self.format == "csv":
                yield from self._csv(lines)
            else:
                yield from self._jsonl(lines)

    def _text_lines(self, stream: _CappedStream) -> Iterator[str]:
        """The file's lines as text, one at a time; a line too long or not UTF-8 is reported and read as blank."""
        while True:
            line = stream.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            self.lines += 1
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                while (rest := stream.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass
                self.errors.row(self.lines, "line", f"longer than {MAX_LINE_BYTES} bytes; skipped")
                yield "\n"
                continue
            if self.lines == 1:
                line = line.removeprefix(b"\xef\xbb\xbf")
            try:
                yield line.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.errors.row(self.lines, "line", f"not UTF-8 text (invalid byte at offset {exc.start})")
                yield "\n"

    def _jsonl(self, lines: Iterator[str]) -> Iterator[LogConversation]:
        grouper = _Grouper(self)
        for number, line in jsonl_objects(lines, self.errors, LINE_SHAPES):
            before = self.errors.row_count
            if "messages" in line:
                conversation = self._conversation_line(number, line)
                if conversation is not None and self.errors.row_count == before:
                    yield from grouper.flush()
                    yield conversation
            elif "role" in line:
                conversation_id = line_conversation_id(number, line.get("conversation_id"), self.errors)
                message = _message(number, "", line, self.errors)
                started_at = _timestamp(number, "", line, self.errors)
                if conversation_id is not None and message is not None and self.errors.row_count == before:
                    yield from grouper.add(number, conversation_id, started_at, message)
            else:
                self.errors.row(number, "json", f"expected a conversation or a message: {LINE_SHAPES}")
        yield from grouper.flush()

    def _conversation_line(self, number: int, line: dict) -> LogConversation | None:
        messages = conversation_messages(number, line["messages"], self.errors)
        if messages is None:
            return None
        started_at = _timestamp(number, "", line, self.errors)
        conversation_id = line.get("conversation_id", line.get("id"))
        if isinstance(conversation_id, bool) or not isinstance(conversation_id, str | int) or conversation_id == "":
            conversation_id = f"line-{number}"
        if len(messages) > MAX_MESSAGES:
            self.errors.row(number, "messages", f"{len(messages)} messages; at most {MAX_MESSAGES} per conversation")
            return None
        conversation = LogConversation(str(conversation_id), started_at)
        for prefix, item in messages:
            message = _message(number, prefix, item, self.errors)
            at = _timestamp(number, prefix, item, self.errors)
            if conversation.started_at is None:
                conversation.started_at = at
            if message is not None:
                conversation.messages.append(message)
        return conversation

    def _csv(self, lines: Iterator[str]) -> Iterator[LogConversation]:
        grouper = _Grouper(self)
        for number, record in csv_records(lines, self.errors, CSV_SHAPE):
            before = self.errors.row_count
            conversation_id = record["conversation_id"].strip()
            if not conversation_id:
                self.errors.row(number, "conversation_id", "must not be empty (the conversation of the message)")
            record["role"] = record["role"].strip()
            for name in ("tokens", "prompt_tokens", *TIMESTAMP_FIELDS):
                value = (record.get(name) or "").strip()
                record[name] = None if value == "" else value
            for name in ("tokens", "prompt_tokens"):
                value = record[name]
                # str.isdigit() also says yes to "²" and to 5,000 digits, which int() refuses: left as text, _count
                # reports the field.
                if value is not None and value.isascii() and value.isdigit() and len(value) <= MAX_NUMBER_DIGITS:
                    record[name] = int(value)
            message = _message(number, "", record, self.errors)
            started_at = _timestamp(number, "", record, self.errors)
            if message is not None and self.errors.row_count == before:
                yield from grouper.add(number, conversation_id, started_at, message)
        yield from grouper.flush()


class _Grouper:
    """Gathers contiguous message lines into conversations, remembering recent ids to notice one that comes back."""

    def __init__(self, reader: LogReader):
        self.reader = reader
        self.current: LogConversation | None = None
        self.recent: OrderedDict[str, None] = OrderedDict()

    def add(self, number: int, conversation_id: str, started_at: float | None, message: LogMessage):
        if self.current is not None and self.current.id == conversation_id:
            if len(self.current.messages) >= MAX_MESSAGES:
                self.reader.errors.row(number, "conversation_id", f"more than {MAX_MESSAGES} messages; skipped")
                return
            self.current.messages.append(message)
            if self.current.started_at is None:
                self.current.started_at = started_at
            return
        yield from self.flush()
        if conversation_id in self.recent:
            self.reader.split_conversations += 1
        self.current = LogConversation(conversation_id, started_at, [message])

    def flush(self):
        if self.current is None:
            return
        finished, self.current = self.current, None
        self.recent[finished.id] = None
        self.recent.move_to_end(finished.id)
        if len(self.recent) > RECENT_IDS:
            self.recent.popitem(last=False)
        yield finished


def _message(number: int, prefix: str, item: dict, errors: UploadErrors) -> LogMessage | None:
    fields = message_fields(number, prefix, item, errors)
    tokens = _count(number, f"{prefix}tokens", item.get("tokens"), errors)
    prompt_tokens = _count(number, f"{prefix}prompt_tokens", item.get("prompt_tokens"), errors)
    usage = item.get("usage")
    if usage is not None:
        if not isinstance(usage, dict):
            expected = "an object with completion_tokens and prompt_tokens"
            errors.row(number, f"{prefix}usage", f"must be {expected}, got {kind(usage)}")
        else:
            completion = _count(number, f"{prefix}usage.completion_tokens", usage.get("completion_tokens"), errors)
            prompt = _count(number, f"{prefix}usage.prompt_tokens", usage.get("prompt_tokens"), errors)
            if fields is not None and fields[0] == "assistant":
                tokens = tokens if tokens is not None else completion
            elif fields is not None:
                tokens = tokens if tokens is not None else prompt
                prompt = None
            prompt_tokens = prompt_tokens if prompt_tokens is not None else prompt
    if fields is None:
        return None
    return LogMessage(fields[0], fields[1], tokens, prompt_tokens)


def _count(number: int, name: str, value, errors: UploadErrors) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        errors.row(number, name, f"must be a non-negative integer, got {str(value)[:30]!r}")
        return None
    return value


def _timestamp(number: int, prefix: str, item: dict, errors: UploadErrors) -> float | None:
    """Epoch seconds of the first of `created_at`/`timestamp` the item holds; None when it holds neither."""
    for name in TIMESTAMP_FIELDS:
        value = item.get(name)
        if value is None:
            continue
        try:
            return parse_timestamp(value)
        except ValueError as exc:
            errors.row(number, f"{prefix}{name}", str(exc))
            return None
    return None


def parse_timestamp(value) -> float:
    """Epoch seconds from ISO-8601 text or a number of seconds (milliseconds above 10^12); ValueError says why not."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = float(text)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(text)
            except ValueError:
                raise ValueError(f"must be ISO-8601 or epoch seconds, got {text[:40]!r}") from None
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            return parsed.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"must be ISO-8601 or epoch seconds, got {str(value)[:40]!r}")
    return value / 1000 if value > 1e12 else float(value)


def iter_conversations(source, *, errors: UploadErrors | None = None) -> Iterator[LogConversation]:
    """The conversations of a log file (a path or a ConversationLog); bad lines go to `errors` and are skipped."""
    reader = LogReader(source)
    if errors is not None:
        reader.errors = errors
    yield from reader
