"""What the gateway notes about a streamed answer while passing its chunks on: when the first content came (the
sample's time to first token), the usage, whether the engine failed mid-reply."""

import time


class StreamWatch:
    """What the sample needs from a stream: when its first content arrived, its usage, whether it failed."""

    __slots__ = ("failed", "first_content_at", "usage")

    def __init__(self):
        self.first_content_at: float | None = None
        self.usage: dict | None = None
        self.failed = False


async def watched(chunks, watch: StreamWatch, include_usage: bool):
    """The chunks unchanged, except the usage chunk when the client did not ask for it; notes them in `watch`."""
    try:
        async for chunk in chunks:
            choices = chunk.get("choices")
            if "error" in chunk:
                watch.failed = True
            elif choices:
                if watch.first_content_at is None and (choices[0].get("delta") or {}).get("content"):
                    watch.first_content_at = time.monotonic()
            elif chunk.get("usage"):
                watch.usage = chunk["usage"]
                if not include_usage:
                    continue
            yield chunk
    finally:
        await chunks.aclose()


async def prepend(first: list[dict], rest):
    """The chunks already read, then the rest of the stream."""
    try:
        for chunk in first:
            yield chunk
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()
