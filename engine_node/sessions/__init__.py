"""Stream sessions: the gateway's SSE chunks numbered and hash-chained, kept per session, resumable after a drop.

The field report ("2. 会话一致性设计") asks for a hash on every chunk with a chained check, the session's random
seed kept in Redis, the full context restored on a retry after a timeout, and an interruption of over 5 s turning
into a rebuild with "generation interrupted" shown to the user. The wire protocol is in docs/stream-sessions.md.

How the gateway uses it (one `StreamSessions` per gateway process; the lead wires it into gateway.py):

    sessions = StreamSessions(RedisSessionStore(url, node=node_name) if url else MemorySessionStore())

    POST /v1/chat/completions (or /v1/completions) with "stream": true:
        seed = body.get("seed"); seed = new_seed() if seed is None else seed; body["seed"] = seed
        open the upstream stream; a refusal (non-200) is answered as today, with no session
        relay = await sessions.start(new_session_id(), seed, request_summary(body, path=request.path))
        relay.run(pump_chunks(relay, chunk_dicts))     # or pump_sse(relay, upstream.content) for raw SSE lines;
                                                       # the producer owns the upstream request: cancelling it
                                                       # closes that request, so vLLM aborts the generation
        response = web.StreamResponse(headers={**SSE_HEADERS, **relay.headers, "X-Engine-Node": node_name})
        await response.prepare(request)
        async with relay.subscribe(0) as stream:
            async for data in stream:
                await response.write(data)   # ConnectionResetError: leave the block; the client is detached and
                                             # generation goes on for the grace period (5 s)

    GET /v1/sessions/{id}/stream?after=<seq>   (or header Last-Event-ID, which EventSource sends on reconnect)
        after = resume_position(request.query.get("after"), request.headers.get("Last-Event-ID"))
        stream = await sessions.resume(id, after)   # SessionUnknown -> 404, SeqOutOfRange -> 400, both in the
                                                    # OpenAI error shape; register before the /v1/{tail} proxy
        the same response headers (with X-Session-Id: id) and the same write loop as above

    on shut-down: await sessions.close()   (interrupts live generations, reason "gateway_stopped")

A session lives in the gateway process that runs its generation, so clients resume on the node named by the
`X-Engine-Node` header of the first response; the session id encodes nothing else. The producer runs as its own
task, so the admission slot the request held is released when the handler returns: a drain does not wait for
detached generations (they end within the grace period).
"""

from engine_node.sessions.exceptions import ChainError, SeqOutOfRange, SessionClosed, SessionUnknown
from engine_node.sessions.framing import (
    DONE,
    FRAMING_KEYS,
    SSE_HEADERS,
    StreamSession,
    canonical_json,
    chain_hash,
    check_chain,
    genesis_hash,
    interrupted_event,
    is_session_id,
    new_seed,
    new_session_id,
    render_sse,
    request_summary,
    resume_position,
    verify_chain,
)
from engine_node.sessions.relay import (
    DEFAULT_ACTIVE_TTL_S,
    DEFAULT_FLUSH_INTERVAL_S,
    DEFAULT_GRACE_S,
    DEFAULT_TTL_S,
    Replay,
    SessionRelay,
    StreamSessions,
    Subscription,
    pump_chunks,
    pump_sse,
)
from engine_node.sessions.stores import (
    DETACHED,
    FINISHED,
    INTERRUPTED,
    STREAMING,
    TERMINAL,
    MemorySessionStore,
    RedisSessionStore,
    SessionRecord,
    SessionStore,
)

__all__ = [
    "DEFAULT_ACTIVE_TTL_S", "DEFAULT_FLUSH_INTERVAL_S", "DEFAULT_GRACE_S", "DEFAULT_TTL_S", "DETACHED", "DONE",
    "FINISHED", "FRAMING_KEYS", "INTERRUPTED", "SSE_HEADERS", "STREAMING", "TERMINAL", "ChainError",
    "MemorySessionStore", "RedisSessionStore", "Replay", "SeqOutOfRange", "SessionClosed", "SessionRecord",
    "SessionRelay", "SessionStore", "SessionUnknown", "StreamSession", "StreamSessions", "Subscription",
    "canonical_json", "chain_hash", "check_chain", "genesis_hash", "interrupted_event", "is_session_id", "new_seed",
    "new_session_id", "pump_chunks", "pump_sse", "render_sse", "request_summary", "resume_position", "verify_chain",
]  # fmt: skip
