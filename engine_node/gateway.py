"""The node's public HTTP endpoint: OpenAI-compatible /v1 with the request policy, /metrics and /healthz.

`POST /v1/chat/completions` is read, validated, classified, given its tier's temperature and its max_tokens,
admitted through the batcher and forwarded; replies cut mid-sentence by the cap are continued. `POST /v1/completions`
goes through admission to the engine's own route, `GET /v1/models` straight to it; nothing else reaches the engine,
which listens on 127.0.0.1 only. Every request passes the path and client-key checks of gateway_access.py first.
"""

import asyncio
import logging
import time

import aiohttp
from aiohttp import ClientConnectionResetError, web

from engine_node import completion, long_replies, metrics, openai_api
from engine_node.admission import Admission, AdmissionRejected
from engine_node.chat_outcomes import record_chat
from engine_node.client_keys import KeyGrant, KeyTable
from engine_node.forwarding import apply_decision, decision_headers
from engine_node.gateway_access import GatewayAccess
from engine_node.openai_api import BadRequest, ChatRequest
from engine_node.policy.explain import ExplainInvalid, explain
from engine_node.policy.rules import Decision, Policy
from engine_node.request_types import encode_body
from engine_node.review_sampling import ReviewSampler
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
from engine_node.stream_watch import StreamWatch, prepend, watched
from engine_node.telemetry import RequestLog
from engine_node.upstream import (
    MAX_BODY_BYTES,
    engine_unreachable,
    forward,
    read_body,
    refused,
    upstream_refused,
)

log = logging.getLogger("engine_node.gateway")


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
        self.access = GatewayAccess()
        self.review = ReviewSampler()  # unsure decisions for the review queue; masked when the agent sends them
        metrics.watch_review(self.review)
        self._session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        """The routes of gateway_access.ROUTES, and a catch-all that answers 404/405 in the OpenAI error shape."""
        # aiohttp's own limit is set above ours so an oversized body reaches read_body() and gets vLLM's error shape.
        app = web.Application(client_max_size=MAX_BODY_BYTES + 1, middlewares=[self.access.middleware])
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/policy/explain", self.explain)
        app.router.add_get("/v1/sessions/{session_id}/stream", self.resume)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_route("*", "/{tail:.*}", self.access.unknown)
        app.on_cleanup.append(self._close)
        return app

    def set_client_keys(self, keys: KeyTable) -> None:
        """Swap the accepted keys in one assignment (a revocation applies to the next request)."""
        self.access.keys = keys

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
        decision, body, headers = self._granted_decision(request, chat)
        ticket = self.admission.admitted(prompt_tokens=chat.prompt_tokens, batch=self.policy.params["batch"])
        try:
            await ticket.__aenter__()
        except AdmissionRejected as exc:
            self.record(started, "rejected", decision)
            return refused(exc)
        if chat.stream:
            # The admission slot goes with the generation, which may outlive this handler (a dropped client).
            return await self._stream(request, chat, decision, body, headers, ticket, started)
        if decision.stream_after_tokens is not None and long_replies.takes_either(request.headers, chat.values):
            return await self._stream_when_long(request, chat, decision, body, headers, ticket, started)
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
        return openai_api.json_response(answer, headers=headers)

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
        """The client asked for a stream: the engine's chunks across continuation rounds, relayed."""
        seed = chat.seed if chat.seed is not None else new_seed()  # kept with the session: "start again" reproduces
        body = {**body, "seed": seed}
        # Usage is always asked for (the sample counts tokens); watched() drops it unless the client asked too.
        watch = StreamWatch()
        chunks = watched(
            completion.stream(self._http(), self._chat_url(), body, decision, {}, True), watch, chat.include_usage
        )
        try:
            first = await anext(chunks, None)  # an engine refusal surfaces here, before any byte is sent
        except (completion.UpstreamError, aiohttp.ClientError) as exc:
            return await self._refused_before_reply(exc, ticket, started, decision, headers)
        rest = prepend([] if first is None else [first], chunks)
        return await self._relay(request, chat, body, decision, headers, ticket, started, watch, rest)

    async def _stream_when_long(
        self,
        request: web.Request,
        chat: ChatRequest,
        decision: Decision,
        body: dict,
        headers: dict,
        ticket,
        started: float,
    ) -> web.StreamResponse:
        """A non-streaming request from a client that also accepts a stream: generated as a stream, answered as one
        JSON object when the reply ends within `max_tokens.streaming_threshold` tokens, streamed once it runs past
        it (engine_node/long_replies.py)."""
        body = {**body, "seed": chat.seed if chat.seed is not None else new_seed()}
        watch = StreamWatch()
        chunks = watched(completion.stream(self._http(), self._chat_url(), body, decision, {}, True), watch, True)
        try:
            head, more = await long_replies.read_head(chunks, decision.stream_after_tokens)
        except (completion.UpstreamError, aiohttp.ClientError) as exc:
            return await self._refused_before_reply(exc, ticket, started, decision, headers)
        if more:
            headers["X-Streamed-After-Tokens"] = str(decision.stream_after_tokens)
            chunks = prepend(head, chunks)
            return await self._relay(request, chat, body, decision, headers, ticket, started, watch, chunks)
        await ticket.__aexit__(None, None, None)
        try:
            answer = long_replies.joined(head)
        except completion.UpstreamError as exc:
            self.record(started, "error", decision)
            return upstream_refused(exc, headers)
        metrics.REQUESTS.labels(outcome="ok").inc()
        ttft = watch.first_content_at - started if watch.first_content_at is not None else None
        self.record(started, "ok", decision, usage=answer.get("usage"), ttft_s=ttft)
        headers["X-Continuation-Rounds"] = str(answer.pop("x_continuation_rounds", 0))
        return openai_api.json_response(answer, headers=headers)

    async def _refused_before_reply(self, exc, ticket, started: float, decision: Decision, headers: dict):
        """The engine refused or could not be reached before any byte of the reply: the slot back, the error out."""
        await ticket.__aexit__(None, None, None)
        if isinstance(exc, completion.UpstreamError):
            self.record(started, "error" if exc.status >= 500 else "client_error", decision)
            return upstream_refused(exc, headers)
        self.record(started, "error", decision)
        return engine_unreachable(exc)

    async def _relay(
        self,
        request: web.Request,
        chat: ChatRequest,
        body: dict,
        decision: Decision,
        headers: dict,
        ticket,
        started,
        watch,
        chunks,
    ) -> web.StreamResponse:
        """A numbered, hash-chained SSE stream whose generation survives a dropped client for the grace period."""
        summary = request_summary({"model": chat.values.get("model"), "messages": body["messages"]}, path=request.path)
        meta = {**summary, "owner": request["client_key"].owner}
        relay = await self.sessions.start(seed=body["seed"], meta=meta)

        async def produce():
            outcome = "error"
            try:
                await pump_chunks(relay, chunks)
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
            stream = await self.sessions.resume(session_id, after, owner=request["client_key"].owner)
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
                    # Chunks published while the last write was under way go out together: fewer writes, and
                    # none of them waits for a chunk still to come.
                    await response.write(data + stream.take_ready())
                await response.write_eof()
            except (ConnectionResetError, ClientConnectionResetError):
                pass  # the client went away; the session keeps generating for the grace period
        return response

    def record(self, started: float, outcome: str, decision: Decision, *, usage: dict | None = None, ttft_s=None):
        """One finished chat request into the sample's window and the gateway's histograms."""
        record_chat(self.requests, time.monotonic() - started, outcome, decision, usage=usage, ttft_s=ttft_s)

    def _granted_decision(self, request: web.Request, chat: ChatRequest) -> tuple[Decision, dict, dict]:
        """The policy's decision for a request under its key's grant, the body to forward and the policy headers."""
        grant: KeyGrant = request["client_key"]
        ignored = chat.business_tag if chat.business_tag and chat.business_tag not in grant.business_tags else None
        if ignored is not None:
            chat.business_tag = None  # served as if untagged: a tag outside the key's grant lifts no limit
            metrics.BUSINESS_TAGS_IGNORED.labels(key=grant.name).inc()
        decision = self.decide(chat, grant.business_tags)
        self.review.offer(chat.latest_user_text, decision)
        headers = decision_headers(decision)
        headers["X-Engine-Node"] = self.node_name
        if ignored is not None:
            headers["X-Business-Tag-Ignored"] = ignored
        return decision, apply_decision(chat.body, decision), headers

    def decide(self, chat: ChatRequest, granted_tags: frozenset[str] = frozenset()) -> Decision:
        started = time.perf_counter()
        decision = self.policy.decide(
            chat.latest_user_text,
            prompt_tokens=chat.prompt_tokens,
            client_max_tokens=chat.client_max_tokens,
            business_tag=chat.business_tag,
            conversation=chat.conversation,
            message_texts=chat.message_texts,
            granted_tags=granted_tags,
        )
        metrics.POLICY_SECONDS.observe(time.perf_counter() - started)
        intent = decision.intent if decision.intent_source == "classifier" else decision.intent_source
        metrics.POLICY_DECISIONS.labels(tier=decision.tier, intent=intent or "none", rule=decision.tier_rule).inc()
        return decision

    # --- explain ----------------------------------------------------------------------------------------------

    async def explain(self, request: web.Request) -> web.Response:
        """What the policy would do with a message, and which rule decided each value."""
        try:
            body = openai_api.parse_json(await read_body(request))
            grant = request["client_key"]
            ignored = _ungranted_tag(body, grant)
            body = {**body, "business_tag": None} if ignored else body
            decision = explain(self.policy, body, granted_tags=grant.business_tags)
        except BadRequest as exc:
            return exc.response()
        except ExplainInvalid as exc:
            return BadRequest(f"{exc.field}: {exc.message}.", exc.field).response()
        if ignored:
            decision["decision"]["notes"].append(f"business tag {ignored!r} is not granted to this key: ignored")
        return openai_api.json_response({"node": self.node_name, "template": self.policy_label, **decision})

    # --- the engine's own routes -----------------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """`POST /v1/completions`: its prompt decided like a chat's latest message (tier, max_tokens cap, degradation;
        no continuation), admitted like a chat request, then the engine's route with the policy's values."""
        try:
            completion_request = openai_api.parse_completion(await read_body(request), request.headers)
        except BadRequest as exc:
            metrics.REQUESTS.labels(outcome="bad_request").inc()
            return exc.response()
        _, body, headers = self._granted_decision(request, completion_request)
        try:
            batch = self.policy.params["batch"]
            async with self.admission.admitted(prompt_tokens=completion_request.prompt_tokens, batch=batch):
                url = f"{self._engine_url()}/v1/completions"
                encoded = encode_body(body)
                return await forward(self._http(), request, url, encoded, self.node_name, headers=headers)
        except AdmissionRejected as exc:
            return refused(exc)

    async def models(self, request: web.Request) -> web.StreamResponse:
        """`GET /v1/models`: what clients send as `model`; no generation, so no admission."""
        return await forward(self._http(), request, f"{self._engine_url()}/v1/models", None, self.node_name)

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


def _ungranted_tag(body: object, grant: KeyGrant) -> str | None:
    """The explain body's business tag when the key may not send it (explained as untagged, with a note)."""
    tag = body.get("business_tag") if isinstance(body, dict) else None
    return tag if isinstance(tag, str) and tag and tag not in grant.business_tags else None
