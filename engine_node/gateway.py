"""The node's public HTTP endpoint: OpenAI-compatible /v1 with the request policy, /metrics and /healthz.

`POST /v1/chat/completions` is read, validated, classified, given its tier's temperature and its max_tokens,
admitted through the batcher and forwarded; replies cut mid-sentence by the cap are continued. Every other /v1 route
(`/v1/models`, `/v1/completions`, ...) is proxied through admission unchanged. The engine listens on 127.0.0.1 only.
"""

import asyncio
import logging
import time

import aiohttp
from aiohttp import ClientConnectionResetError, web

from engine_node import completion, metrics, openai_api
from engine_node.admission import Admission, AdmissionRejected, QueueFull
from engine_node.openai_api import BadRequest, ChatRequest
from engine_node.policy.explain import ExplainInvalid, estimate_tokens, explain
from engine_node.policy.rules import Decision, Policy
from engine_node.sessions import (
    SSE_HEADERS,
    SeqOutOfRange,
    SessionUnknown,
    StreamSessions,
    new_seed,
    pump_chunks,
    request_summary,
    resume_position,
)
from engine_node.telemetry import RequestLog

log = logging.getLogger("engine_node.gateway")

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}
MAX_BODY_BYTES = 8 * 1024 * 1024


class Gateway:
    """Holds the live policy (hot parameters + bundle + classifier) and forwards admitted requests to the engine."""

    def __init__(
        self,
        *,
        engine_url,
        admission: Admission,
        status,
        node_name: str,
        sessions: StreamSessions | None = None,
        requests: RequestLog | None = None,
    ):
        self._engine_url = engine_url  # a callable: the engine's port changes only across restarts
        self.admission = admission
        self.requests = requests if requests is not None else RequestLog()  # finished chat requests, for the sample
        self.sessions = sessions if sessions is not None else StreamSessions()
        self._status = status
        self.node_name = node_name
        self.policy = Policy(None)
        self.policy_label = "defaults"
        self._session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        # aiohttp's own limit is set above ours so an oversized body reaches read_body() and gets vLLM's error shape.
        app = web.Application(client_max_size=MAX_BODY_BYTES + 1)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/policy/explain", self.explain)
        app.router.add_get("/v1/sessions/{session_id}/stream", self.resume)
        app.router.add_route("*", "/v1/{tail:.*}", self.proxy)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/healthz", self.healthz)
        app.on_cleanup.append(self._close)
        return app

    @property
    def params(self) -> dict:
        return self.policy.params

    def set_policy(self, policy: Policy, label: str) -> None:
        """Swap the request-level policy in one assignment; requests already decided keep theirs."""
        self.policy = policy
        self.policy_label = label

    # --- chat completions -------------------------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        try:
            chat = openai_api.parse_chat(await read_body(request), request.headers)
        except BadRequest as exc:
            metrics.REQUESTS.labels(outcome="bad_request").inc()
            return exc.response()
        decision = self.decide(chat)
        body = apply_decision(chat.body, decision)
        headers = decision_headers(decision)
        headers["X-Engine-Node"] = self.node_name
        ticket = self.admission.admitted(prompt_tokens=chat.prompt_tokens, batch=self.policy.params["batch"])
        try:
            await ticket.__aenter__()
        except AdmissionRejected as exc:
            self.record(started, "rejected", decision)
            return refused(exc)
        if chat.stream:
            # The admission slot goes with the generation, which may outlive this handler (a dropped client).
            return await self._stream(request, chat, decision, body, headers, ticket, started)
        try:
            answer = await completion.complete(self._http(), self._chat_url(), body, decision, {})
        except completion.UpstreamError as exc:
            self.record(started, "error" if exc.status >= 500 else "client_error", decision)
            return upstream_refused(exc, headers)
        except aiohttp.ClientError as exc:
            self.record(started, "error", decision)
            return engine_unreachable(exc)
        finally:
            await ticket.__aexit__(None, None, None)
        metrics.REQUESTS.labels(outcome="ok").inc()
        self.record(started, "ok", decision, usage=answer.get("usage"))
        headers["X-Continuation-Rounds"] = str(answer.pop("x_continuation_rounds", 0))
        return web.json_response(answer, headers=headers, dumps=openai_api.compact_json)

    async def _stream(
        self,
        request: web.Request,
        chat: ChatRequest,
        decision: Decision,
        body: dict,
        headers: dict,
        ticket,
        started: float,
    ) -> web.StreamResponse:
        """A numbered, hash-chained SSE stream whose generation survives a dropped client for the grace period."""
        if body.get("seed") is None:
            body = {**body, "seed": new_seed()}  # kept with the session, so "start again" can reproduce the text
        # Usage is always asked for (the sample counts tokens); _watched drops it unless the client asked too.
        watch = _StreamWatch()
        chunks = _watched(
            completion.stream(self._http(), self._chat_url(), body, decision, {}, True), watch, chat.include_usage
        )
        try:
            first = await anext(chunks, None)  # an engine refusal surfaces here, before any byte is sent
        except completion.UpstreamError as exc:
            await ticket.__aexit__(None, None, None)
            self.record(started, "error" if exc.status >= 500 else "client_error", decision)
            return upstream_refused(exc, headers)
        except aiohttp.ClientError as exc:
            await ticket.__aexit__(None, None, None)
            self.record(started, "error", decision)
            return engine_unreachable(exc)
        relay = await self.sessions.start(seed=body["seed"], meta=request_summary(body, path=request.path))

        async def produce():
            outcome = "error"
            try:
                await pump_chunks(relay, _prepend(first, chunks))
                metrics.REQUESTS.labels(outcome="ok").inc()
                outcome = "error" if watch.failed else "ok"
            except aiohttp.ClientError:
                metrics.REQUESTS.labels(outcome="engine_error").inc()
                raise
            except asyncio.CancelledError:
                outcome = None  # interrupted (client gone past the grace period, shutdown): not a finished request
                raise
            finally:
                await ticket.__aexit__(None, None, None)
                if outcome is not None:
                    ttft = watch.first_content_at - started if watch.first_content_at is not None else None
                    self.record(started, outcome, decision, usage=watch.usage, ttft_s=ttft)

        relay.run(produce())
        return await self._write_stream(request, relay.subscribe(0), {**headers, **relay.headers})

    async def resume(self, request: web.Request) -> web.StreamResponse:
        """`GET /v1/sessions/{id}/stream?after=<seq>` (or Last-Event-ID): the rest of a stream, no gap, no repeat."""
        session_id = request.match_info["session_id"]
        try:
            after = resume_position(request.query.get("after"), request.headers.get("Last-Event-ID"))
            stream = await self.sessions.resume(session_id, after)
        except SessionUnknown:
            return openai_api.error_response(404, f"session {session_id!r} is unknown on this node", "NotFoundError")
        except (SeqOutOfRange, ValueError) as exc:
            return openai_api.error_response(400, f"after: {exc}", "BadRequestError", "after")
        return await self._write_stream(request, stream, {"X-Engine-Node": self.node_name, **stream.headers})

    async def _write_stream(self, request: web.Request, stream, headers: dict) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={**headers, **SSE_HEADERS})
        async with stream:
            try:
                await response.prepare(request)
                async for data in stream:
                    await response.write(data)
                await response.write_eof()
            except (ConnectionResetError, ClientConnectionResetError):
                pass  # the client went away; the session keeps generating for the grace period
        return response

    def record(
        self, started: float, outcome: str, decision: Decision, *, usage: dict | None = None, ttft_s=None
    ) -> None:
        """One finished chat request into the sample's window and the gateway's histograms."""
        e2e = time.monotonic() - started
        tokens = None
        if usage:
            tokens = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        if outcome == "ok":
            metrics.CHAT_DURATION.observe(e2e)
            if ttft_s is not None:
                metrics.CHAT_TTFT.observe(ttft_s)
            if tokens is not None:
                metrics.CHAT_TOKENS.observe(tokens)
        source = decision.intent_source
        intent = (
            (decision.intent or "none") if source == "classifier" else ("tag" if source == "business_tag" else "none")
        )
        self.requests.record(
            e2e_s=e2e, outcome=outcome, ttft_s=ttft_s, tokens=tokens, intent=intent, tier=decision.tier
        )

    def decide(self, chat: ChatRequest) -> Decision:
        started = time.perf_counter()
        decision = self.policy.decide(
            chat.latest_user_text,
            prompt_tokens=chat.prompt_tokens,
            client_max_tokens=chat.client_max_tokens,
            business_tag=chat.business_tag,
            conversation=chat.conversation,
        )
        metrics.POLICY_SECONDS.observe(time.perf_counter() - started)
        intent = decision.intent if decision.intent_source == "classifier" else decision.intent_source
        metrics.POLICY_DECISIONS.labels(tier=decision.tier, intent=intent or "none", rule=decision.tier_rule).inc()
        return decision

    # --- explain ----------------------------------------------------------------------------------------------

    async def explain(self, request: web.Request) -> web.Response:
        """What the policy would do with a message, and which rule decided each value."""
        try:
            decision = explain(self.policy, openai_api.parse_json(await read_body(request)))
        except BadRequest as exc:
            return exc.response()
        except ExplainInvalid as exc:
            return BadRequest(f"{exc.field}: {exc.message}.", exc.field).response()
        return web.json_response(
            {"node": self.node_name, "template": self.policy_label, **decision}, dumps=openai_api.compact_json
        )

    # --- everything else under /v1 ----------------------------------------------------------------------------

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await read_body(request)
        except BadRequest as exc:
            return exc.response()
        try:
            prompt_tokens = estimate_tokens(body.decode("utf-8", "replace"))
            async with self.admission.admitted(prompt_tokens=prompt_tokens, batch=self.policy.params["batch"]):
                return await self._forward(request, body)
        except AdmissionRejected as exc:
            return refused(exc)

    async def _forward(self, request: web.Request, body: bytes) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        url = f"{self._engine_url()}{request.rel_url}"
        try:
            upstream = await self._http().request(request.method, url, data=body, headers=headers)
        except aiohttp.ClientError as exc:
            return engine_unreachable(exc)
        async with upstream:
            response = web.StreamResponse(status=upstream.status)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    response.headers[key] = value
            response.headers["X-Engine-Node"] = self.node_name
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
        metrics.REQUESTS.labels(outcome="ok" if upstream.status < 400 else f"http_{upstream.status}").inc()
        return response

    async def metrics(self, request: web.Request) -> web.Response:
        """The agent's own metrics followed by the engine's (vllm:* names), in one exposition."""
        text = metrics.render()
        try:
            async with self._http().get(f"{self._engine_url()}/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
                if r.status == 200:
                    text += await r.text()
        except (aiohttp.ClientError, TimeoutError):
            pass
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def healthz(self, request: web.Request) -> web.Response:
        status = self._status()
        return web.json_response(status, status=200 if status.get("status") == "online" else 503)

    def _chat_url(self) -> str:
        return f"{self._engine_url()}/v1/chat/completions"

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        return self._session

    async def _close(self, app) -> None:
        await self.sessions.close()
        if self._session is not None:
            await self._session.close()


async def read_body(request: web.Request) -> bytes:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        size = request.content_length
        raise BadRequest(f"The request body is {size} bytes; the limit is {MAX_BODY_BYTES}.", None, 413)
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise BadRequest(f"The request body exceeds {MAX_BODY_BYTES} bytes.", status=413) from None
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(f"The request body exceeds {MAX_BODY_BYTES} bytes.", status=413)
    return body


def apply_decision(body: dict, decision: Decision) -> dict:
    """The body forwarded to the engine: the policy's temperature and max_tokens replace the client's."""
    forwarded = dict(body)
    forwarded["temperature"] = decision.temperature
    forwarded.pop("max_completion_tokens", None)
    if decision.max_tokens is not None:
        forwarded["max_tokens"] = decision.max_tokens
    return forwarded


def decision_headers(decision: Decision) -> dict:
    headers = {
        "X-Policy-Tier": decision.tier,
        "X-Policy-Rule": decision.tier_rule,
        "X-Policy-Temperature": f"{decision.temperature:g}",
        "X-Policy-Max-Tokens": str(decision.max_tokens),
    }
    if decision.intent and decision.intent_source == "classifier":
        headers["X-Policy-Intent"] = f"{decision.intent};confidence={decision.confidence:.3f}"
    return headers


class _StreamWatch:
    """What the sample needs from a stream: when its first content arrived, its usage, whether it failed."""

    __slots__ = ("failed", "first_content_at", "usage")

    def __init__(self):
        self.first_content_at: float | None = None
        self.usage: dict | None = None
        self.failed = False


async def _watched(chunks, watch: _StreamWatch, include_usage: bool):
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


async def _prepend(first: dict | None, rest):
    try:
        if first is not None:
            yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()


def upstream_refused(exc: completion.UpstreamError, headers: dict) -> web.Response:
    """The engine's own error (e.g. a prompt over max_model_len), relayed unchanged."""
    metrics.REQUESTS.labels(outcome=f"http_{exc.status}").inc()
    return web.Response(body=exc.body, status=exc.status, content_type=exc.content_type, headers=headers)


def refused(exc: Exception) -> web.Response:
    """429 for a full queue, 503 for a closed gate or a queue wait past its limit; both say when to retry."""
    status = 429 if isinstance(exc, QueueFull) else 503
    metrics.REQUESTS.labels(outcome="rejected" if status == 429 else "unavailable").inc()
    return openai_api.error_response(
        status,
        str(exc),
        "TooManyRequests" if status == 429 else "ServiceUnavailable",
        headers={"Retry-After": str(getattr(exc, "retry_after_s", 1))},
    )


def engine_unreachable(exc: Exception) -> web.Response:
    metrics.REQUESTS.labels(outcome="engine_error").inc()
    return openai_api.error_response(
        503, f"engine unreachable: {exc}", "ServiceUnavailable", headers={"Retry-After": "1"}
    )
