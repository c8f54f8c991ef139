"""Open-loop chat traffic on a schedule: each request is sent at its due time whatever the earlier ones are doing.

The replay runs of the control plane use it (one share of a run per event loop), and so does `bench/replay.py`.
Like `engine_node.loadgen` it is plain asyncio + aiohttp against the gateways' OpenAI route; unlike it, requests come
from a plan (due offset, node URL, messages) and every one is measured: what the gateway decided (its X-Policy-*
headers), time to first token when streamed, time to the end of the first round, end to end, usage and continuation
rounds.

The first round is what the user waits for when the gateway continues a reply the first-turn cap cut: the
continuation streams behind text already on screen. A streamed answer's first round ends with the last chunk that
arrived before the chunk marked `x_continuation_round` (engine_node/completion.py); an answer that was not continued,
and any non-streamed answer (its client sees nothing until every round is done), ends its first round at its end.
"""

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import aiohttp

from engine_node.policy.masking import mask

ERROR_CHARS = 300
# What a node reports is bounded before it is stored: counts fit the row's columns, confidences are finite.
MAX_COUNT = 2**31 - 1
MAX_ROUNDS = 32767


def _count(value, maximum: int = MAX_COUNT) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        return None
    return value


@dataclass(frozen=True)
class Shot:
    """One request of a plan: its sequence number, due offset (s), gateway base URL and body."""

    seq: int
    due_s: float
    url: str
    body: dict


@dataclass
class Outcome:
    """What one request did; offsets in seconds from the schedule's start."""

    seq: int
    due_s: float
    sent_s: float | None = None
    status_code: int | None = None
    ok: bool = False
    error: str = ""
    e2e_s: float | None = None
    ttft_s: float | None = None
    first_round_s: float | None = None
    prompt_tokens: int | None = None
    reply_tokens: int | None = None
    continuation_rounds: int | None = None
    max_tokens: int | None = None
    tier: str = ""
    tier_rule: str = ""
    intent: str = ""
    intent_confidence: float | None = None
    node: str = ""


def read_decision(outcome: Outcome, headers) -> None:
    """The gateway's decision from its response headers (engine_node.forwarding.decision_headers)."""
    outcome.tier = headers.get("X-Policy-Tier", "")[:16]
    outcome.tier_rule = headers.get("X-Policy-Rule", "")[:32]
    outcome.node = headers.get("X-Engine-Node", "")[:64]
    max_tokens = headers.get("X-Policy-Max-Tokens", "")
    outcome.max_tokens = _count(int(max_tokens)) if max_tokens.isdigit() else None
    intent, _, confidence = headers.get("X-Policy-Intent", "").partition(";confidence=")
    outcome.intent = intent[:64]
    try:
        value = float(confidence) if confidence else None
    except ValueError:
        value = None
    outcome.intent_confidence = value if value is not None and math.isfinite(value) else None
    rounds = headers.get("X-Continuation-Rounds", "")
    if rounds.isdigit():
        outcome.continuation_rounds = _count(int(rounds), MAX_ROUNDS)


def read_usage(outcome: Outcome, usage) -> None:
    if isinstance(usage, dict):
        outcome.prompt_tokens = _count(usage.get("prompt_tokens"))
        outcome.reply_tokens = _count(usage.get("completion_tokens"))


async def chat_once(session: aiohttp.ClientSession, shot: Shot, outcome: Outcome, started: float) -> None:
    """Send one chat request and fill `outcome`; `started` is the monotonic time it left."""
    # A redirect is an answer: following it would carry the key and the messages to an address nobody checked.
    async with session.post(f"{shot.url}/v1/chat/completions", json=shot.body, allow_redirects=False) as response:
        outcome.status_code = response.status
        read_decision(outcome, response.headers)
        if response.status != 200:
            text = await response.text(errors="replace")
            # An error body may quote the request (a customer's words from the log): masked, then cut.
            outcome.error = mask(f"HTTP {response.status}: {_message(text)}", limit=ERROR_CHARS)
            outcome.e2e_s = time.monotonic() - started
            return
        if not shot.body.get("stream"):
            answer = await response.json()
            read_usage(outcome, answer.get("usage"))
        else:
            await _read_stream(response, outcome, started)
        outcome.e2e_s = time.monotonic() - started
        if outcome.first_round_s is None:
            outcome.first_round_s = outcome.e2e_s
        outcome.ok = not outcome.error


async def _read_stream(response: aiohttp.ClientResponse, outcome: Outcome, started: float) -> None:
    last_event_s = None  # when the latest data event arrived: the first round's end once the next one is marked
    async for raw in response.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError:
            continue
        if "error" in event:
            outcome.error = mask(f"stream error: {_message(json.dumps(event))}", limit=ERROR_CHARS)
            continue
        now = time.monotonic() - started
        if outcome.first_round_s is None and "x_continuation_round" in event and last_event_s is not None:
            outcome.first_round_s = last_event_s
        last_event_s = now
        for choice in event.get("choices") or ():
            if outcome.ttft_s is None and (choice.get("delta") or {}).get("content"):
                outcome.ttft_s = now
        if "x_continuation_rounds" in event:
            outcome.continuation_rounds = _count(event["x_continuation_rounds"], MAX_ROUNDS)
        if event.get("usage"):
            read_usage(outcome, event["usage"])


def _message(text: str) -> str:
    try:
        body = json.loads(text)
        return str((body.get("error") or {}).get("message") or body.get("message") or text)
    except (ValueError, AttributeError):
        return text


async def open_loop(
    shots: Iterable[Shot],
    *,
    start_at: float,
    session: aiohttp.ClientSession,
    on_outcome: Callable[[Outcome], None],
    stopped: Callable[[], bool],
    until_s: float | None = None,
    grace_s: float = 2.0,
    sent_hook: Callable[[Outcome], None] | None = None,
    before_each: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Send each shot at `start_at + due_s` (epoch seconds), never waiting for replies; report every outcome.

    `stopped()` is checked before each send and while waiting: once true nothing more is sent, and requests still
    in flight get `grace_s` to finish before they are cancelled (reported with error "cancelled"). Shots due after
    `until_s` are not sent.
    """
    pending: dict[asyncio.Task, Outcome] = {}

    async def one(shot: Shot, outcome: Outcome) -> None:
        started = time.monotonic()
        try:
            await chat_once(session, shot, outcome, started)
        except asyncio.CancelledError:
            outcome.error = outcome.error or "cancelled"
            outcome.e2e_s = None
            raise
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            outcome.error = (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)[:ERROR_CHARS]
            outcome.e2e_s = time.monotonic() - started
        finally:
            on_outcome(outcome)

    for shot in shots:
        if until_s is not None and shot.due_s > until_s:
            break
        while True:
            if stopped():
                break
            wait = start_at + shot.due_s - time.time()
            if wait <= 0:
                break
            await asyncio.sleep(min(wait, 0.25))
        if stopped():
            break
        if before_each is not None:
            await before_each()
        outcome = Outcome(seq=shot.seq, due_s=shot.due_s, sent_s=time.time() - start_at)
        if sent_hook is not None:
            sent_hook(outcome)
        task = asyncio.create_task(one(shot, outcome))
        pending[task] = outcome
        task.add_done_callback(pending.pop)
    if pending:
        deadline = time.monotonic() + (grace_s if stopped() else float("inf"))
        while pending and time.monotonic() < deadline:
            if stopped() and deadline == float("inf"):
                deadline = time.monotonic() + grace_s
            await asyncio.wait(list(pending), timeout=0.25)
        for task in list(pending):
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
