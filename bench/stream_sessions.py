"""What stream sessions add per SSE chunk: framing (hash chain) and the store append, in µs per chunk.

The baseline is what the gateway spends without sessions: one compact json.dumps of the chunk and its SSE line.
- framing: StreamSession.frame_sse (canonical JSON, sha256, SSE bytes).
- publish: SessionRelay.publish with each store, with one store write per chunk (the worst case), per 12 chunks
  (a stream at 50 chunks/s with the default 0.25 s flush interval) and one for the whole stream. The Redis store
  (REDIS_URL, default redis://127.0.0.1:6379/14) makes one pipelined RPUSH + HSET + PEXPIRE round trip per
  write; CPU is this process's only, not the Redis server's. (Paced runs are not used: on a shared machine the
  event loop's wake-ups between chunks cost more CPU than the work measured.)
"""

import asyncio
import json
import os
import sys
import time
import timeit
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine_node.sessions import (
    DEFAULT_FLUSH_INTERVAL_S,
    MemorySessionStore,
    RedisSessionStore,
    StreamSession,
    StreamSessions,
)

CHUNK = {
    "id": "chatcmpl-5f0c6a6f3b0e4d4c9a2f0f3f1d2e8b7a",
    "object": "chat.completion.chunk",
    "created": 1767225600,
    "model": "qwen2.5-7b-instruct",
    "choices": [{"index": 0, "delta": {"content": "您的订单"}, "logprobs": None, "finish_reason": None}],
}
N = 5000
STREAM_RATE = 50  # chunks/s of one streamed answer
BATCHES = (1, round(STREAM_RATE * DEFAULT_FLUSH_INTERVAL_S), 0)


def per_call_us(func, number: int) -> float:
    return min(timeit.repeat(func, number=number, repeat=5)) / number * 1e6


async def publish_us(store, *, batch: int, n: int = N) -> tuple[float, float]:
    """(wall µs, CPU µs) per chunk for n publishes, awaiting the store write after every `batch` chunks (0: never)."""
    sessions = StreamSessions(store, grace_s=60, flush_interval_s=0)
    relay = await sessions.start(None, 1, {"model": CHUNK["model"]})
    subscription = relay.subscribe(0)  # attached, as in the gateway
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(1, n + 1):
        await relay.publish(CHUNK)  # does not yield: the writer task runs at the next await
        if batch and i % batch == 0:
            await relay._writer
    await relay.finish()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    subscription.close()
    return wall / n * 1e6, cpu / n * 1e6


async def redis_figures(url: str) -> dict:
    node = f"bench-{uuid.uuid4().hex[:8]}"
    store = RedisSessionStore(url, node=node)
    try:
        await store.redis.ping()
    except OSError as exc:
        return {"error": str(exc)}
    try:
        return {batch: await publish_us(store, batch=batch, n=2000 if batch else N) for batch in BATCHES}
    finally:
        keys = [key async for key in store.redis.scan_iter(f"engine_node:session:{node}:*")]
        if keys:
            await store.redis.delete(*keys)
        await store.close()


def main() -> None:
    baseline = per_call_us(
        lambda: f"data: {json.dumps(CHUNK, ensure_ascii=False, separators=(',', ':'))}\n\n".encode(), N
    )
    session = StreamSession("bench-session-0001", 1)
    framing = per_call_us(lambda: session.frame_sse(CHUNK), N)
    memory = {batch: asyncio.run(publish_us(MemorySessionStore(), batch=batch)) for batch in BATCHES}
    size = len(StreamSession("bench-session-0001", 1).frame_sse(CHUNK))
    print(f"chunk: {size} bytes framed ({len(json.dumps(CHUNK, ensure_ascii=False, separators=(',', ':')))} unframed)")
    print(f"{'baseline: json.dumps + SSE line':<50}{baseline:7.1f} µs")
    print(f"{'framing: hash chain + SSE line':<50}{framing:7.1f} µs ({framing / baseline:.1f}x baseline)")
    report("memory", memory)
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
    figures = asyncio.run(redis_figures(url))
    if "error" in figures:
        print(f"Redis store skipped: {figures['error']}")
        return
    report("Redis", figures)


def report(store: str, figures: dict) -> None:
    for batch, (wall, cpu) in figures.items():
        label = "one write in all" if batch == 0 else "a write per chunk" if batch == 1 else f"a write per {batch}"
        print(f"{f'publish, {store} store, {label}':<50}{wall:7.1f} µs wall, {cpu:7.1f} µs CPU per chunk")


if __name__ == "__main__":
    main()
