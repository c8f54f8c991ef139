"""The gateway's reading of an OpenAI chat request: validation with vLLM's error shape, and the fields policy needs.

Bad input is answered here, before admission, in the body vLLM itself uses
(`{"error": {"message", "type", "param", "code"}}`), so a client sees the same errors with or without the gateway.

The policy reads every text the engine will read: each message's content parts of a text type, whatever the role,
and the text fields beside them (reasoning, refusal, tool-call arguments); a part type the gateway cannot read as
text and that is no media reference is refused, naming it. A request asks for one generation: fields that make the
engine generate or score more than one sequence per admitted request are refused, naming the field
(docs/gateway-access.md, "What the policy reads" and "One request, one generation").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import msgspec
from aiohttp import web

from engine_node import request_types
from engine_node.policy.explain import ExplainInvalid, checked_name, estimate_tokens

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Content part types vLLM renders as text (its renderers' MM_PARSER_MAP), each with the field holding the text.
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}
# Parts that reference media: no text for the policy to read, and the engine refuses them unless it serves a model
# that takes them. Every other type (embeddings, which bypass the tokenizer, tool references, anything unknown) is
# refused: the policy would pass it unread.
MEDIA_PARTS = frozenset({"image_url", "input_image", "audio_url", "input_audio", "video_url"})
# Fields that make the engine generate more than one sequence, or score every prompt token, for one request: admission
# counts one slot and the max_tokens cap bounds one sequence, so each would multiply what a request may cost. The
# value each may take (its default); anything else is refused. `echo` scores the prompt when logprobs are asked.
ONE_GENERATION = (
    ("n", 1),
    ("best_of", 1),
    ("use_beam_search", False),
    ("echo", False),
    ("prompt_logprobs", None),
    ("logprob_token_ids", None),
    ("prompt_embeds", None),
)
# OpenAI's bound on alternatives per generated token; vLLM's own (`--max-logprobs`) may be set higher, or to the
# whole vocabulary (-1).
MAX_TOP_LOGPROBS = 20
# Fields the gateway reads and removes: vLLM does not know them.
GATEWAY_FIELDS = ("business_tag", "conversation_id")
MAX_TAG_LENGTH = 64
MAX_CONVERSATION_LENGTH = 128
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class BadRequest(Exception):
    """A request the gateway refuses; `param` names the field."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, error_type: str = "BadRequestError"):
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.error_type = error_type

    def response(self) -> web.Response:
        return error_response(self.status, self.message, self.error_type, self.param)


def error_response(
    status: int, message: str, error_type: str, param: str | None = None, headers: dict | None = None
) -> web.Response:
    body = {"error": {"message": message, "type": error_type, "param": param, "code": status}}
    return json_response(body, status=status, headers=headers)


def json_response(value: object, *, status: int = 200, headers: dict | None = None) -> web.Response:
    """A JSON answer encoded by msgspec in one pass, straight to bytes."""
    return web.Response(
        body=request_types.encode(value), status=status, headers=headers, content_type="application/json"
    )


def compact_json(value: object) -> str:
    return request_types.encode(value).decode("utf-8")


class _Values:
    """The top-level fields the gateway reads, decoded from their raw JSON on first read (`get` as on a dict)."""

    __slots__ = ("_decoded", "_fields")

    def __init__(self, fields: dict[str, msgspec.Raw]):
        self._fields = fields
        self._decoded: dict[str, object] = {}

    def get(self, name: str, default: object = None) -> object:
        if name in self._decoded:
            return self._decoded[name]
        raw = self._fields.get(name)
        value = default if raw is None else request_types.decode_value(raw)
        self._decoded[name] = value
        return value


@dataclass
class ChatRequest:
    """A validated chat body (still to be forwarded) and what the policy reads from it."""

    # The body to forward: the client's top-level fields as raw JSON (request_types.encode_body writes it), less the
    # gateway's own; `values` reads any of them decoded.
    body: dict
    values: _Values
    seed: int | None
    stream: bool
    # What the classifier reads and the review queue samples: the latest user message (the latest message not from
    # the assistant when there is none), every text part of it.
    latest_user_text: str
    prompt_tokens: int
    client_max_tokens: int | None
    business_tag: str | None
    conversation: str | None
    include_usage: bool
    # Every message's text in order, whatever its role: what the strict patterns read (Policy.decide).
    message_texts: tuple[str, ...] = ()


def parse_json(raw: bytes) -> object:
    """A whole body as Python values (the explain route, which reads every field it is sent)."""
    _check_text(raw)
    try:
        return request_types.decode_value(raw)
    except RecursionError:
        raise BadRequest("The request body nests too deeply.") from None
    except msgspec.DecodeError as exc:
        raise _not_json(raw, exc) from None


def parse_fields(raw: bytes) -> dict[str, msgspec.Raw]:
    """A request object's top-level fields, each still raw JSON: what the gateway forwards unless it edits it."""
    _check_text(raw)
    try:
        return request_types.decode_fields(raw)
    except request_types.Refused as exc:
        raise BadRequest(exc.message, exc.field) from None
    except msgspec.ValidationError:
        raise BadRequest("The request body must be a JSON object.") from None
    except msgspec.DecodeError as exc:
        raise _not_json(raw, exc) from None


def _check_text(raw: bytes) -> None:
    # The decoder skips the fields it forwards without reading their strings' bytes: the whole body is checked here.
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest(f"The request body is not valid UTF-8 (byte {exc.start}).") from None


def _not_json(raw: bytes, exc: msgspec.DecodeError) -> BadRequest:
    # JSON may spell an unpaired UTF-16 surrogate (\ud800), which is no text: the engine's tokenizer cannot take it.
    if _SURROGATE_ESCAPE.search(raw):
        return BadRequest("The request body holds an unpaired UTF-16 surrogate (\\ud800-\\udfff).")
    return BadRequest(f"The request body is not valid JSON: {exc}.")


def parse_chat(raw: bytes, headers) -> ChatRequest:
    fields = parse_fields(raw)
    messages = fields.get("messages")
    try:
        raws = request_types.decode_messages(messages) if messages is not None else []
    except request_types.Refused as exc:
        raise BadRequest(exc.message, exc.field) from None
    if not raws:
        raise BadRequest("messages: must be a non-empty list of message objects.", "messages")
    typed = []
    parts = 0
    for index, value in enumerate(raws):
        try:
            message = request_types.decode_message(value, index)
        except request_types.Refused as exc:
            raise BadRequest(exc.message, "messages") from None
        if message.role not in ROLES:
            raise BadRequest(
                f"messages[{index}].role: {message.role!r} is not one of {', '.join(sorted(ROLES))}.", "messages"
            )
        if isinstance(message.content, list):
            parts += len(message.content)
            if parts > request_types.MAX_PARTS:
                raise BadRequest(
                    f"messages: more than {request_types.MAX_PARTS} content parts in one request.", "messages"
                )
        typed.append(message)
    latest_user, latest_spoken = None, ""
    texts = []
    for index, message in enumerate(typed):
        text = _message_text(message, index)
        texts.append(text)
        if message.role == "user":
            latest_user = text
        elif message.role != "assistant":
            latest_spoken = text
    latest = latest_user if latest_user is not None else latest_spoken
    # Chat templates add a few tokens per message (role markers, end-of-turn).
    prompt_tokens = estimate_tokens("".join(texts)) + 4 * len(typed)
    return _request(fields, headers, latest, prompt_tokens, tuple(texts))


def parse_completion(raw: bytes, headers) -> ChatRequest:
    """A `POST /v1/completions` body, read as the policy reads a chat: its prompt is the latest user text, so the
    same tiers, max_tokens caps and degradation apply (a raw prompt is no way around them)."""
    fields = parse_fields(raw)
    raw_prompt = fields.get("prompt")
    ids = request_types.decode_prompt_ids(raw_prompt) if raw_prompt is not None else None
    if ids is None:
        prompt = request_types.decode_value(raw_prompt) if raw_prompt is not None else None
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = prompt
    suffix = request_types.decode_value(fields["suffix"]) if "suffix" in fields else None
    if suffix is not None and not isinstance(suffix, str):
        raise BadRequest("suffix: must be a string.", "suffix")
    read = () if suffix is None else (suffix,)
    if ids:
        # Token ids: nothing for the tiers to read (normal tier), but the max_tokens caps hold all the same.
        return _request(fields, headers, "", len(ids), read)
    if not isinstance(prompt, str):
        raise BadRequest("prompt: must be a string or a list of token ids (one prompt per request).", "prompt")
    return _request(fields, headers, prompt, estimate_tokens(prompt), (prompt, *read))


def _request(
    fields: dict[str, msgspec.Raw], headers, latest_user: str, prompt_tokens: int, message_texts: tuple[str, ...]
) -> ChatRequest:
    """The fields every generation request shares: one generation, sampling bounds, max_tokens, streaming, tag and
    conversation."""
    body = _Values(fields)
    for name, allowed in ONE_GENERATION:
        value = body.get(name)
        if value is None or (value == allowed and type(value) is type(allowed)):
            continue
        if allowed is None:
            raise BadRequest(
                f"{name}: not accepted; the gateway serves one generation of one prompt per request.", name
            )
        got = repr(value)[:40]
        raise BadRequest(
            f"{name}: must be {compact_json(allowed)} or absent (one generation per request), got {got}.", name
        )
    for name in ("top_logprobs", "logprobs"):
        value = body.get(name)
        if value is None or isinstance(value, bool):
            continue  # chat's logprobs is a flag; its top_logprobs says how many
        if not isinstance(value, int) or not 0 <= value <= MAX_TOP_LOGPROBS:
            raise BadRequest(f"{name}: must be an integer from 0 to {MAX_TOP_LOGPROBS}, got {value!r}.", name)
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is None:
            continue
        if not _is_number(value):
            raise BadRequest(f"{name}: must be a number, got {value!r}.", name)
        upper = 2.0 if name == "temperature" else 1.0
        if not 0.0 <= value <= upper:
            raise BadRequest(f"{name}: must be between 0 and {upper:g}, got {value}.", name)
    client_max = None
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadRequest(f"{name}: must be a positive integer, got {value!r}.", name)
        client_max = value if client_max is None else client_max
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"stream: must be true or false, got {stream!r}.", "stream")
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or not stream):
        raise BadRequest("stream_options: must be an object, and only with stream=true.", "stream_options")
    tag = headers.get("X-Business-Tag") or body.get("business_tag")
    tag = _checked_name(tag, "business_tag", MAX_TAG_LENGTH)
    conversation = headers.get("X-Conversation-Id") or body.get("conversation_id")
    conversation = _checked_name(conversation, "conversation_id", MAX_CONVERSATION_LENGTH)
    forwarded = {key: value for key, value in fields.items() if key not in GATEWAY_FIELDS}
    seed = body.get("seed")
    return ChatRequest(
        body=forwarded,
        values=body,
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        stream=stream,
        latest_user_text=latest_user,
        prompt_tokens=prompt_tokens,
        client_max_tokens=client_max,
        business_tag=tag,
        conversation=conversation,
        include_usage=bool(options and options.get("include_usage")),
        message_texts=message_texts,
    )


def _message_text(message: request_types.Message, index: int) -> str:
    """Every text of a message the engine's chat template renders: its content's text parts, then the text fields
    beside it and the arguments of its tool calls (their types are the decoder's: request_types.Message)."""
    text = _content_text(message.content, index)
    extra = [value for value in (message.refusal, message.reasoning, message.reasoning_content) if value is not None]
    if message.tool_calls:
        extra += [call.function.arguments for call in message.tool_calls]
    return "\n".join((text, *extra)) if extra else text


def _content_text(content: str | list | None, index: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for number, value in enumerate(content):
        try:
            part = request_types.decode_part(value, index, number)
        except request_types.Refused as exc:
            raise BadRequest(exc.message, "messages") from None
        field = TEXT_PARTS.get(part.type)
        if field is not None:
            text = getattr(part, field)
            if text is None:
                where = f"messages[{index}].content[{number}]"
                raise BadRequest(f"{where}: a {part.type} part needs a string {field}.", "messages")
            parts.append(text)
        elif part.type not in MEDIA_PARTS:
            where = f"messages[{index}].content[{number}].type"
            known = ", ".join(sorted({*TEXT_PARTS, *MEDIA_PARTS}))
            raise BadRequest(f"{where}: {part.type!r} is not a part the gateway can read (one of {known}).", "messages")
    return "".join(parts)


def _checked_name(value: object, field: str, limit: int) -> str | None:
    try:
        return checked_name(value, field, limit)
    except ExplainInvalid as exc:
        raise BadRequest(f"{field}: {exc.message}.", field) from None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
