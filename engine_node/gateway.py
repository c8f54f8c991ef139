"""The node's public HTTP endpoint: OpenAI-compatible /v1 proxied to the engine, /metrics and /healthz.

The engine listens on 127.0.0.1 only; everything from outside passes the admission gate here.
"""

import logging

import aiohttp
from aiohttp import web

from engine_node import metrics
from engine_node.admission import Admission, GateClosed

log = logging.getLogger("engine_node.gateway")

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}


class Gateway:
    """Holds the live (hot) parameters and forwards admitted requests to the engine."""

    def __init__(self, *, engine_url, admission: Admission, status, node_name: str):
        self._engine_url = engine_url  # a callable: the engine's port changes only across restarts
        self.admission = admission
        self._status = status
        self.node_name = node_name
        self.params: dict | None = None
        self._session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/v1/{tail:.*}", self.proxy)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/healthz", self.healthz)
        app.on_cleanup.append(self._close)
        return app

    def apply_hot(self, params: dict) -> None:
        """Swap the request-level parameters in one assignment; requests already admitted keep theirs."""
        self.params = params

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        try:
            async with self.admission.admitted():
                return await self._forward(request, body)
        except GateClosed as exc:
            metrics.REQUESTS.labels(outcome="unavailable").inc()
            return web.json_response(
                {"error": {"message": str(exc), "type": "ServiceUnavailable", "code": 503}},
                status=503,
                headers={"Retry-After": str(exc.retry_after_s)},
            )

    async def _forward(self, request: web.Request, body: bytes) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        url = f"{self._engine_url()}{request.rel_url}"
        try:
            upstream = await self._http().request(request.method, url, data=body, headers=headers)
        except aiohttp.ClientError as exc:
            metrics.REQUESTS.labels(outcome="engine_error").inc()
            return web.json_response(
                {"error": {"message": f"engine unreachable: {exc}", "type": "ServiceUnavailable", "code": 503}},
                status=503,
                headers={"Retry-After": "1"},
            )
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

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        return self._session

    async def _close(self, app) -> None:
        if self._session is not None:
            await self._session.close()
