"""What the stream-session tests share: vLLM-shaped chunks, SSE parsing and a producer that publishes them."""

from __future__ import annotations

import asyncio
import json
import os

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
GRACE_S = 0.5  # the margins below stay >= 0.2 s on a loaded machine


def chunk(i: int, text: str, finish_reason: str | None = None) -> dict:
    """A chat chunk shaped like vLLM's."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "chat",
        "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish_reason}],
    }


WORDS = [f"w{i}-说 " for i in range(30)]


def parse_sse(data: bytes) -> dict:
    """One SSE event as {"event", "id", "data"} (data parsed unless it is [DONE])."""
    event = {"event": None, "id": None, "data": None}
    for line in data.decode().strip("\n").split("\n"):
        name, _, value = line.partition(": ")
        event[name] = value
    if event["data"] != "[DONE]":
        event["data"] = json.loads(event["data"])
    return event


def text_of(events: list[dict]) -> str:
    return "".join(
        e["data"]["choices"][0]["delta"]["content"]
        for e in events
        if isinstance(e["data"], dict) and e["data"].get("choices")
    )


class Producer:
    """Publishes len(words) chunks with a pause before each; remembers whether it was cancelled."""

    def __init__(self, relay, words=WORDS, pause_s: float = 0.01, fail_after: int | None = None):
        self.relay, self.words, self.pause_s, self.fail_after = relay, words, pause_s, fail_after
        self.published = 0
        self.cancelled = False

    async def __call__(self):
        try:
            for i, word in enumerate(self.words):
                await asyncio.sleep(self.pause_s)
                if self.fail_after is not None and i == self.fail_after:
                    raise ConnectionResetError("engine went away")
                last = i == len(self.words) - 1
                await self.relay.publish(chunk(i, word, "stop" if last else None))
                self.published += 1
            await self.relay.finish()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def read(stream, limit: int | None = None) -> list[dict]:
    events = []
    async for data in stream:
        events.append(parse_sse(data))
        if limit is not None and len(events) == limit:
            break
    return events
