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

import json
import math
import re
from dataclasses import dataclass

from aiohttp import web

from engine_node.policy.explain import ExplainInvalid, checked_name, estimate_tokens

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Content part types vLLM renders as text (its renderers' MM_PARSER_MAP), each with the field holding the text.
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}
# Parts that reference media: no text for the policy to read, and the engine refuses them unless it serves a model
# that takes them. Every other type (embeddings, which bypass the tokenizer, tool references, anything unknown) is
# refused: the policy would pass it unread.
MEDIA_PARTS = frozenset({"image_url", "input_image", "audio_url", "input_audio", "video_url"})
# A message's text beside its content that chat templates render (vLLM's message params).
MESSAGE_TEXT_FIELDS = ("refusal", "reasoning", "reasoning_content")
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
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


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
    return web.json_response(body, status=status, headers=headers, dumps=compact_json)


def compact_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass
class ChatRequest:
    """A validated chat body (still to be forwarded) and what the policy reads from it."""

    body: dict
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
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"The request body is not valid UTF-8 (byte {exc.start}).") from None
    try:
        body = json.loads(text)
    except RecursionError:
        raise BadRequest("The request body nests too deeply.") from None
    except ValueError as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}.") from None
    # JSON may spell an unpaired UTF-16 surrogate (\ud800), which is no text: the engine's tokenizer cannot take it.
    # Only such an escape brings one in, so only a body holding one pays for the check.
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest("The request body holds an unpaired UTF-16 surrogate (\\ud800-\\udfff).") from None
    return body


def parse_chat(raw: bytes, headers) -> ChatRequest:
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: must be a non-empty list of message objects.", "messages")
    latest_user, latest_spoken = None, ""
    texts = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadRequest(f"messages[{index}]: must be an object.", "messages")
        role = message.get("role")
        if role not in ROLES:
            raise BadRequest(f"messages[{index}].role: {role!r} is not one of {', '.join(sorted(ROLES))}.", "messages")
        text = _message_text(message, index)
        texts.append(text)
        if role == "user":
            latest_user = text
        elif role != "assistant":
            latest_spoken = text
    latest = latest_user if latest_user is not None else latest_spoken
    # Chat templates add a few tokens per message (role markers, end-of-turn).
    prompt_tokens = estimate_tokens("".join(texts)) + 4 * len(messages)
    return _request(body, headers, latest, prompt_tokens, tuple(texts))


def parse_completion(raw: bytes, headers) -> ChatRequest:
    """A `POST /v1/completions` body, read as the policy reads a chat: its prompt is the latest user text, so the
    same tiers, max_tokens caps and degradation apply (a raw prompt is no way around them)."""
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise BadRequest("suffix: must be a string.", "suffix")
    read = () if suffix is None else (suffix,)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        # Token ids: nothing for the tiers to read (normal tier), but the max_tokens caps hold all the same.
        return _request(body, headers, "", len(prompt), read)
    if not isinstance(prompt, str):
        raise BadRequest("prompt: must be a string or a list of token ids (one prompt per request).", "prompt")
    return _request(body, headers, prompt, estimate_tokens(prompt), (prompt, *read))


def _request(body: dict, headers, latest_user: str, prompt_tokens: int, message_texts: tuple[str, ...]) -> ChatRequest:
    """The fields every generation request shares: one generation, sampling bounds, max_tokens, streaming, tag and
    conversation."""
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
    forwarded = {key: value for key, value in body.items() if key not in GATEWAY_FIELDS}
    return ChatRequest(
        body=forwarded,
        stream=stream,
        latest_user_text=latest_user,
        prompt_tokens=prompt_tokens,
        client_max_tokens=client_max,
        business_tag=tag,
        conversation=conversation,
        include_usage=bool(options and options.get("include_usage")),
        message_texts=message_texts,
    )


def _message_text(message: dict, index: int) -> str:
    """Every text of a message the engine's chat template renders: its content's text parts, then the text fields
    beside it and the arguments of its tool calls."""
    text = _content_text(message.get("content"), index)
    extra = []
    for name in MESSAGE_TEXT_FIELDS:
        value = message.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise BadRequest(f"messages[{index}].{name}: must be a string.", "messages")
            extra.append(value)
    calls = message.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise BadRequest(f"messages[{index}].tool_calls: must be a list.", "messages")
        for number, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if not isinstance(arguments, str):
                where = f"messages[{index}].tool_calls[{number}].function.arguments"
                raise BadRequest(f"{where}: must be a string (JSON text).", "messages")
            extra.append(arguments)
    return "\n".join((text, *extra)) if extra else text


def _content_text(content: object, index: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for number, part in enumerate(content):
            part_type = part.get("type") if isinstance(part, dict) else None
            if not isinstance(part_type, str):
                raise BadRequest(f"messages[{index}].content: parts must be objects with a type.", "messages")
            field = TEXT_PARTS.get(part_type)
            if field is not None:
                if not isinstance(part.get(field), str):
                    where = f"messages[{index}].content[{number}]"
                    raise BadRequest(f"{where}: a {part_type} part needs a string {field}.", "messages")
                parts.append(part[field])
            elif part_type not in MEDIA_PARTS:
                where = f"messages[{index}].content[{number}].type"
                known = ", ".join(sorted({*TEXT_PARTS, *MEDIA_PARTS}))
                raise BadRequest(
                    f"{where}: {part_type!r} is not a part the gateway can read (one of {known}).", "messages"
                )
        return "".join(parts)
    raise BadRequest(f"messages[{index}].content: must be a string or a list of parts.", "messages")


def _checked_name(value: object, field: str, limit: int) -> str | None:
    try:
        return checked_name(value, field, limit)
    except ExplainInvalid as exc:
        raise BadRequest(f"{field}: {exc.message}.", field) from None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
