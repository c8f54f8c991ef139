"""The typed form of an OpenAI request body as the gateway decodes it: msgspec structures with limits, read once.

A body is decoded in C by msgspec, never into a tree of Python objects walked afterwards: its top level into raw
JSON values (`msgspec.Raw`, one per field, kept byte for byte), then each field the gateway reads from its own raw
value into a typed structure. Fields the gateway does not read travel to the engine as the client wrote them (vLLM
accepts many extensions), and so do the messages: the forwarded body is those raw values with the gateway's edits
spliced in (`encode_body`), not a re-serialised copy.

The limits are checked while decoding, so a hostile body is refused before any Python code walks it: how many
messages and content parts, how long a role or part type, and how deeply anything nests (docs/security.md, "Threat
model"). Each refusal names the field, in vLLM's error shape (openai_api.BadRequest).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta, Raw, Struct

# A conversation longer than this is no chat a customer-service front end sends: 4 template tokens a message alone
# would fill a 16k context. The walk the policy makes over the messages is bounded by it (a few ms at most).
MAX_MESSAGES = 4096
# Content parts: per message (a message with a few images and texts), and over the whole body, which bounds the
# policy's walk over every text part whatever the message count.
MAX_PARTS_PER_MESSAGE = 256
MAX_PARTS = 8192
MAX_TOOL_CALLS_PER_MESSAGE = 128
# Roles, part types and tool-call types are short names; a megabyte of one is no name.
MAX_NAME_CHARS = 64
# A completion's prompt as token ids (one prompt per request).
MAX_PROMPT_IDS = 1 << 20

Name = Annotated[str, Meta(max_length=MAX_NAME_CHARS)]


class Part(Struct, forbid_unknown_fields=False):
    """One content part: its type and the text fields a text part may carry (media parts hold references)."""

    type: Name
    text: str | None = None
    refusal: str | None = None
    thinking: str | None = None


class ToolFunction(Struct, forbid_unknown_fields=False):
    arguments: str


class ToolCall(Struct, forbid_unknown_fields=False):
    function: ToolFunction


class Message(Struct, forbid_unknown_fields=False):
    """One chat message: every field of it a chat template renders as text."""

    role: Name | None = None
    # Parts stay raw until the total over the body is known to be within MAX_PARTS (decode_part reads each).
    content: str | Annotated[list[Raw], Meta(max_length=MAX_PARTS_PER_MESSAGE)] | None = None
    refusal: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None
    tool_calls: Annotated[list[ToolCall], Meta(max_length=MAX_TOOL_CALLS_PER_MESSAGE)] | None = None


# Messages stay raw until their count is known to be within the limit: a body of a few hundred thousand tiny messages
# is refused after one skipping pass in C, before any of them becomes a Python object.
Messages = Annotated[list[Raw], Meta(max_length=MAX_MESSAGES)]
PromptIds = Annotated[list[int], Meta(max_length=MAX_PROMPT_IDS)]

_fields_decoder = msgspec.json.Decoder(dict[str, Raw])
_messages_decoder = msgspec.json.Decoder(Messages)
_message_decoder = msgspec.json.Decoder(Message)
_part_decoder = msgspec.json.Decoder(Part)
_prompt_ids_decoder = msgspec.json.Decoder(PromptIds)
_any_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


class Refused(ValueError):
    """A body or field the decoder refused: `where` is the path in the body (`messages[3].content[0].text`), `field`
    the top-level field (None for the body as a whole)."""

    def __init__(self, message: str, field: str | None, where: str):
        super().__init__(message)
        self.message = message
        self.field = field
        self.where = where


def decode_fields(raw: bytes) -> dict[str, Raw]:
    """The body's top-level fields, each as its raw JSON value. Raises msgspec.DecodeError / ValidationError (not an
    object) and Refused (nested past msgspec's depth bound, the interpreter's recursion limit: the fields the
    gateway reads have fixed shapes, the rest is only skipped over, in C, and forwarded as it is)."""
    try:
        fields = _fields_decoder.decode(raw)
    except RecursionError:
        raise Refused("The request body nests too deeply.", None, "") from None
    return fields


def decode_messages(value: Raw) -> list[Raw]:
    """`messages` as one raw value per message, at most MAX_MESSAGES of them; raises Refused naming the field."""
    try:
        return _messages_decoder.decode(value)
    except msgspec.ValidationError as exc:
        raise _refused(exc, "messages") from None


def decode_message(value: Raw, index: int) -> Message:
    """Message `index`, typed; raises Refused naming the message, part list or field that breaks its type."""
    try:
        return _message_decoder.decode(value)
    except msgspec.ValidationError as exc:
        raise _refused(exc, f"messages[{index}]", "messages") from None


def decode_part(value: Raw, index: int, number: int) -> Part:
    try:
        return _part_decoder.decode(value)
    except msgspec.ValidationError as exc:
        raise _refused(exc, f"messages[{index}].content[{number}]", "messages") from None


def decode_prompt_ids(value: Raw) -> list[int] | None:
    """A prompt of token ids (None when the prompt is something else)."""
    try:
        return _prompt_ids_decoder.decode(value)
    except msgspec.ValidationError:
        return None


def decode_value(value: Raw) -> Any:
    """A scalar or small field (temperature, stream_options, ...) as a Python value, for the checks that name it."""
    return _any_decoder.decode(value)


def encode(value: Any) -> bytes:
    """Compact JSON, non-ASCII kept; `Raw` values anywhere in it are written as they are."""
    return _encoder.encode(value)


def encode_body(fields: dict[str, Any]) -> bytes:
    """The body to forward: raw fields verbatim, the gateway's own values (temperature, max_tokens, seed) encoded."""
    return _encoder.encode(fields)


def append_message(messages: Raw, message: dict) -> Raw:
    """The raw `messages` array with one message added at its end, spliced without decoding the others."""
    head = bytes(messages).rstrip()
    body = head[:-1].rstrip()
    joiner = b"" if body.endswith(b"[") else b","
    return Raw(body + joiner + _encoder.encode(message) + b"]")


def _refused(exc: msgspec.ValidationError, prefix: str, field: str | None = None) -> Refused:
    """msgspec's "Expected `str`, got `int` - at `$.content[0]`" as "messages[3].content[0]: expected ..."."""
    text = str(exc)
    message, found, at = text.rpartition(" - at `")
    if not found:
        message, at = text, "$`"
    where = prefix + at[1:-1]
    return Refused(f"{where}: {message[0].lower() + message[1:]}.", field or prefix, where)
