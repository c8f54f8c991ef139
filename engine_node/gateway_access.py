"""Who may call what on the gateway: the one route list, the path check in front of it, and the client-key check.

The gateway serves only the routes below; the engine's other endpoints (vLLM's dev endpoints /sleep,
/collective_rpc, /reset_prefix_cache, /v1/load_lora_adapter, ...) are the agent's alone, and the gateway calls the
engine only at fixed paths, never at one built from the client's. Before routing, a request target with a dot
segment, a percent-encoded character, a backslash, an empty segment or a fragment is refused with 400; every /v1
route needs `Authorization: Bearer <client key>` (401 otherwise), and /metrics a scrape key once the node knows one.
All refusals use the OpenAI error shape. docs/gateway-access.md has the reasoning.
"""

from __future__ import annotations

from aiohttp import web

from engine_node import metrics, openai_api
from engine_node.client_keys import CLIENT, SCRAPE, KeyTable

# path -> the methods it answers; the handlers are registered in Gateway.app(), in this order.
ROUTES: dict[str, tuple[str, ...]] = {
    "/v1/chat/completions": ("POST",),  # the request policy, admission, continuation, resumable streams
    "/v1/completions": ("POST",),  # admission, then the engine's /v1/completions
    "/v1/models": ("GET",),  # the engine's /v1/models (what `model` clients must send)
    "/v1/policy/explain": ("POST",),  # what the policy would decide for a message
    "/v1/sessions/{session_id}/stream": ("GET",),  # resume a dropped stream (docs/stream-sessions.md)
    "/healthz": ("GET",),  # open: load balancers and the demo read it
    "/metrics": ("GET",),  # open until the node knows a scrape key
}
_SESSION_PREFIX, _SESSION_SUFFIX = "/v1/sessions/", "/stream"


def path_problem(target: str) -> str | None:
    """Why a request target is refused before routing, or None. `target` is the raw one (aiohttp's raw_path)."""
    if not target.startswith("/"):
        return "the request target must be a path (origin form), not a full URL"
    path = target.partition("?")[0]
    # One pass of cheap substring tests on the common path; the precise reasons only for a refused target.
    if "%" not in path and "\\" not in path and "//" not in path and "/." not in path and "#" not in path:
        return None
    if "%" in path:
        return "percent-encoded characters (such as %2e or %2f) are not allowed in the path"
    if "\\" in path:
        return "backslashes are not allowed in the path"
    if "//" in path:
        return "empty path segments (//) are not allowed"
    if "#" in path:
        return "a fragment (#) is not allowed in the request target"
    segments = path.split("/")
    if "." in segments or ".." in segments:
        return "dot segments (. and ..) are not allowed in the path"
    return None


def _allowed_methods(path: str) -> tuple[str, ...] | None:
    if path in ROUTES:
        return ROUTES[path]
    if path.startswith(_SESSION_PREFIX) and path.endswith(_SESSION_SUFFIX):
        return ROUTES["/v1/sessions/{session_id}/stream"]
    return None


class GatewayAccess:
    """The path check and key check every request passes, and the answer for routes the gateway does not serve."""

    def __init__(self):
        self.keys = KeyTable()

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        problem = path_problem(request.raw_path)
        if problem is not None:
            metrics.REQUESTS.labels(outcome="bad_path").inc()
            return openai_api.error_response(400, f"path: {problem}.", "BadRequestError", "path")
        path = request.path
        if path.startswith("/v1/"):
            grant = self.keys.find(request.headers.get("Authorization"), CLIENT)
            if grant is None:
                return self._unauthorized(request, CLIENT)
            request["client_key"] = grant
        elif (
            path == "/metrics"
            and self.keys.requires_scrape_key
            and self.keys.find(request.headers.get("Authorization"), SCRAPE) is None
        ):
            return self._unauthorized(request, SCRAPE)
        return await handler(request)

    def _unauthorized(self, request: web.Request, kind: str) -> web.Response:
        metrics.REQUESTS.labels(outcome="unauthorized").inc()
        if kind == SCRAPE:
            message = "/metrics needs Authorization: Bearer <scrape key> on this node."
        elif self.keys.client_count == 0:
            # An operator reads this while setting a node up; it names no key and nothing a caller could use.
            message = (
                "This node has no client keys yet (no policy bundle from its pool, and no --client-keys-file): "
                "it serves no one until it has."
            )
        elif request.headers.get("Authorization"):
            message = "Invalid client key."
        else:
            message = "Missing client key: send Authorization: Bearer <client key>."
        return openai_api.error_response(
            401, message, "AuthenticationError", headers={"WWW-Authenticate": 'Bearer realm="engine-node"'}
        )

    async def unknown(self, request: web.Request) -> web.Response:
        """Any route the gateway does not serve: 405 for a known path with another method, else 404."""
        allowed = _allowed_methods(request.path)
        if allowed is not None and request.method not in allowed:
            return openai_api.error_response(
                405,
                f"{request.method} is not allowed on {request.path}; use {', '.join(allowed)}.",
                "MethodNotAllowed",
                headers={"Allow": ", ".join(allowed)},
            )
        metrics.REQUESTS.labels(outcome="not_found").inc()
        return openai_api.error_response(
            404,
            f"{request.path} is not a route of this gateway; it serves {', '.join(ROUTES)}.",
            "NotFoundError",
        )
