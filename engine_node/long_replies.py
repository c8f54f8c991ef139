"""`max_tokens.streaming_threshold`: short replies whole, long ones streamed, to a client that takes either.

A non-streaming chat request whose `Accept` header also names `text/event-stream` says "give me the answer whole, or
a stream if it is long". The gateway generates it as a stream and reads up to the threshold's number of content
chunks (vLLM sends about one token per chunk): a reply that ends within them is answered as the one JSON object a
non-streaming client expects (its continuation rounds joined, usage summed); a reply that runs past them is answered
as the numbered, resumable SSE stream a streaming request gets, starting with the chunks already read
(`X-Streamed-After-Tokens` says so). The report's chat front end shows long replies with a typewriter effect and
short ones at once; a client that accepts only JSON gets JSON whatever the length, at the plain JSON path's cost.

The policy decides whether a request can get past the threshold at all (`Decision.stream_after_tokens`: None when
its max_tokens is at or below it, as under degradation).
"""

from __future__ import annotations

import json

from engine_node.completion import UpstreamError

# Request fields whose answer the joined chunks of a stream would not carry whole (token logprobs, tool calls, several
# choices): such a request is answered as JSON whatever its length.
_NOT_JOINABLE = ("logprobs", "top_logprobs", "tools", "functions", "tool_choice", "function_call")


def takes_either(headers, body: dict) -> bool:
    """The client accepts a stream as well as JSON, and nothing in its request needs the JSON path."""
    accept = headers.get("Accept")
    if accept is None or "text/event-stream" not in accept.lower():  # media types are case-insensitive
        return False
    return not any(body.get(key) for key in _NOT_JOINABLE) and body.get("n") in (None, 1)


async def read_head(chunks, threshold: int) -> tuple[list[dict], bool]:
    """The chunks up to and including the first content chunk past `threshold` ones, and whether the stream went on
    past them (the rest is still in `chunks`). An engine refusal before any chunk raises, as the stream does."""
    head: list[dict] = []
    content_chunks = 0
    async for chunk in chunks:
        head.append(chunk)
        choices = chunk.get("choices")
        if choices and (choices[0].get("delta") or {}).get("content"):
            content_chunks += 1
            if content_chunks > threshold:
                return head, True
    return head, False


def joined(head: list[dict]) -> dict:
    """The whole answer of a stream that ended, in the shape of a non-streaming chat completion (with the rounds in
    `x_continuation_rounds`, as completion.complete() gives it). An error the engine sent mid-reply is an
    UpstreamError: a client that asked for the answer whole gets it whole or not at all."""
    text: list[str] = []
    identity: dict | None = None
    finish_reason = None
    usage = None
    rounds = 0
    for chunk in head:
        if "error" in chunk:
            raise UpstreamError(502, json.dumps(chunk).encode(), "application/json")
        choices = chunk.get("choices")
        if not choices:
            usage = chunk.get("usage") or usage
            continue
        if identity is None:
            identity = chunk
        choice = choices[0]
        text.append((choice.get("delta") or {}).get("content") or "")
        finish_reason = choice.get("finish_reason") or finish_reason
        rounds = chunk.get("x_continuation_rounds", rounds)
    if identity is None:
        raise UpstreamError(502, b'{"error": {"message": "the engine sent no reply", "type": "BadGateway"}}', "")
    return {
        "id": identity["id"],
        "object": "chat.completion",
        "created": identity["created"],
        "model": identity.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(text)},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage,
        "x_continuation_rounds": rounds,
    }
