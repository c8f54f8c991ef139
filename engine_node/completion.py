"""One answer from the engine, continued across rounds when the first-turn cap cut it mid-sentence.

The seed's "首轮响应固定 max_tokens=256 … 检测到回复包含未完成句式时，自动触发流式续传": the gateway asks the engine
to continue its own partial reply (`continue_final_message`, vLLM's chat extension) and splices the rounds into one
response: one id, one role chunk, one finish_reason, usage summed. The client's text shows no seam; a streamed answer
marks it for whoever measures the first round: the first chunk of continuation round k carries
`"x_continuation_round": k` (an extra field, which OpenAI clients ignore), so everything before it is round 1.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import msgspec

from engine_node import metrics
from engine_node.policy.rules import Decision, ends_mid_sentence
from engine_node.request_types import append_message, encode_body

_JSON = {"Content-Type": "application/json"}
_decode = msgspec.json.Decoder().decode


class UpstreamError(Exception):
    """The engine refused the first round; the gateway relays its status and body unchanged."""

    def __init__(self, status: int, body: bytes, content_type: str):
        super().__init__(f"engine answered {status}")
        self.status = status
        self.body = body
        self.content_type = content_type


def continuation_body(body: dict, text: str, max_tokens: int | None) -> dict:
    """The next round's request: the conversation plus the partial reply, which the engine continues."""
    follow = dict(body)
    reply = {"role": "assistant", "content": text}
    messages = body["messages"]
    # The client's messages stay the raw JSON they came as; the partial reply is spliced onto their end.
    follow["messages"] = append_message(messages, reply) if isinstance(messages, msgspec.Raw) else [*messages, reply]
    follow["continue_final_message"] = True
    follow["add_generation_prompt"] = False
    if max_tokens is not None:
        follow["max_tokens"] = max_tokens
    return follow


def should_continue(finish_reason: str | None, text: str, decision: Decision, rounds: int) -> bool:
    return finish_reason == "length" and rounds < decision.continuation_rounds and ends_mid_sentence(text)


async def sse_events(content: aiohttp.StreamReader) -> AsyncIterator[dict | str]:
    """The `data:` payloads of an SSE body: parsed JSON objects, or the string "[DONE]"."""
    async for line in content:
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            yield "[DONE]"
            return
        if payload:
            yield _decode(payload)


async def complete(http: aiohttp.ClientSession, url: str, body: dict, decision: Decision, headers: dict) -> dict:
    """A non-streaming answer: the rounds' texts joined, the last finish_reason, usage summed."""
    answer: dict | None = None
    text = ""
    rounds = 0
    request = body
    while True:
        async with http.post(url, data=encode_body(request), headers={**headers, **_JSON}) as upstream:
            raw = await upstream.read()
            if upstream.status != 200:
                if answer is None:
                    raise UpstreamError(upstream.status, raw, upstream.content_type)
                metrics.CONTINUATIONS.labels(outcome="engine_error").inc()
                break
            reply = _decode(raw)
        choice = reply["choices"][0]
        text += choice["message"].get("content") or ""
        if answer is None:
            answer = reply
        else:
            answer["choices"][0]["finish_reason"] = choice["finish_reason"]
            _add_usage(answer, reply.get("usage"), first=False)
        if not should_continue(choice["finish_reason"], text, decision, rounds):
            break
        rounds += 1
        metrics.CONTINUATIONS.labels(outcome="round").inc()
        request = continuation_body(body, text, decision.max_tokens)
    answer["choices"][0]["message"]["content"] = text
    answer["x_continuation_rounds"] = rounds
    return answer


async def stream(
    http: aiohttp.ClientSession, url: str, body: dict, decision: Decision, headers: dict, include_usage: bool
) -> AsyncIterator[dict]:
    """Chunk objects of one streamed answer across rounds (without "[DONE]"); raises UpstreamError before any."""
    base = {**body, "stream": True, "stream_options": {"include_usage": True}}
    request = base
    text = ""
    rounds = 0
    identity: dict | None = None
    usage: dict | None = None
    final: dict | None = None
    final_round = 0
    while True:
        finish_reason = None
        marked = rounds == 0  # the first chunk of a continuation round carries its number (the round boundary)
        async with http.post(url, data=encode_body(request), headers={**headers, **_JSON}) as upstream:
            if upstream.status != 200:
                raw = await upstream.read()
                if identity is None:
                    raise UpstreamError(upstream.status, raw, upstream.content_type)
                metrics.CONTINUATIONS.labels(outcome="engine_error").inc()
                break
            async for event in sse_events(upstream.content):
                if event == "[DONE]":
                    break
                if "error" in event:
                    yield event  # vLLM reports a failure mid-stream as a data event; pass it on
                    return
                if not event.get("choices"):
                    if event.get("usage"):
                        usage = _sum_usage(usage, event["usage"])
                    continue
                if identity is None:
                    identity = {"id": event["id"], "created": event["created"], "model": event.get("model")}
                else:
                    event.update(identity)
                choice = event["choices"][0]
                delta = choice.get("delta") or {}
                if rounds and "role" in delta:
                    delta.pop("role")
                content = delta.get("content") or ""
                text += content
                if choice.get("finish_reason"):
                    finish_reason = choice["finish_reason"]
                    final, final_round = event, rounds
                    if content:
                        chunk = _without_finish(event)
                        if not marked:
                            chunk["x_continuation_round"], marked = rounds, True
                        yield chunk
                    continue
                if rounds and not content and not delta:
                    continue
                if not marked:
                    event["x_continuation_round"], marked = rounds, True
                yield event
        if not should_continue(finish_reason, text, decision, rounds):
            break
        rounds += 1
        metrics.CONTINUATIONS.labels(outcome="round").inc()
        request = continuation_body(base, text, decision.max_tokens)
    if final is not None:
        choice = final["choices"][0]
        choice["delta"] = {"content": ""}
        if not marked and final_round == rounds:
            final["x_continuation_round"] = rounds  # a continuation round that produced no text
        final["x_continuation_rounds"] = rounds
        yield final
    if include_usage and usage is not None and identity is not None:
        yield {
            "id": identity["id"],
            "object": "chat.completion.chunk",
            "created": identity["created"],
            "model": identity["model"],
            "choices": [],
            "usage": usage,
        }


def _without_finish(event: dict) -> dict:
    copy = _decode(encode_body(event))
    copy["choices"][0]["finish_reason"] = None
    copy["choices"][0].pop("stop_reason", None)
    return copy


def _sum_usage(total: dict | None, usage: dict) -> dict:
    """Prompt tokens of the first round (later rounds re-read the reply as prompt), completion tokens summed."""
    if total is None:
        return dict(usage)
    total = dict(total)
    total["completion_tokens"] = total.get("completion_tokens", 0) + usage.get("completion_tokens", 0)
    total["total_tokens"] = total.get("prompt_tokens", 0) + total["completion_tokens"]
    return total


def _add_usage(answer: dict, usage: dict | None, *, first: bool) -> None:
    if usage and not first:
        answer["usage"] = _sum_usage(answer.get("usage"), usage)
