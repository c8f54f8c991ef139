"""The gateway's side of the engine: reading a client's body, forwarding to the engine at a fixed path, and the
answers a client gets when admission or the engine refuses.

The engine is only ever called at the path the gateway names (`/v1/completions`, `/v1/models`), never at one built
from the client's request, and only with the headers listed here: the client's key, cookies and anything else stay
at the gateway.
"""

from __future__ import annotations

import aiohttp
from aiohttp import web

from engine_node import completion, metrics, openai_api
from engine_node.admission import QueueFull
from engine_node.openai_api import BadRequest

MAX_BODY_BYTES = 8 * 1024 * 1024
_FORWARDED_HEADERS = ("Content-Type", "Accept", "X-Request-Id")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}


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


async def forward(
    http: aiohttp.ClientSession,
    request: web.Request,
    url: str,
    body: bytes | None,
    node_name: str,
    *,
    headers: dict | None = None,
) -> web.StreamResponse:
    """Send the request to `url` (the engine's, at a fixed path) and stream the engine's answer back, with
    `headers` (the policy's) added to it."""
    sent = {name: request.headers[name] for name in _FORWARDED_HEADERS if name in request.headers}
    try:
        upstream = await http.request(request.method, url, data=body, headers=sent)
    except aiohttp.ClientError as exc:
        return engine_unreachable(exc)
    async with upstream:
        response = web.StreamResponse(status=upstream.status)
        for key, value in upstream.headers.items():
            if key.lower() not in _HOP_BY_HOP:
                response.headers[key] = value
        response.headers.update(headers or {})
        response.headers["X-Engine-Node"] = node_name
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
    metrics.REQUESTS.labels(outcome="ok" if upstream.status < 400 else f"http_{upstream.status}").inc()
    return response


def upstream_refused(exc: completion.UpstreamError, headers: dict) -> web.Response:
    """The engine's own error (e.g. a prompt over max_model_len), relayed unchanged."""
    metrics.REQUESTS.labels(outcome=f"http_{exc.status}").inc()
    return web.Response(body=exc.body, status=exc.status, content_type=exc.content_type, headers=headers)


def refused(exc: Exception) -> web.Response:
    """429 for a full queue, 503 for a warming node, a closed gate or a queue wait past its limit; all say when to
    retry."""
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
