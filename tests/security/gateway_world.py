"""The real gateway (engine_node.gateway.Gateway with its key checks, policy, admission and forwarding) in this
process, in front of an engine stand-in that records every body it is sent and answers like vLLM.

The stand-in is for vLLM, not for a component of ours: what the security tests here hold is what the gateway lets
through to the engine (the body it forwards, or nothing at all), which only a recorder can show exactly.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
from aiohttp import web

from engine_node.admission import Admission
from engine_node.client_keys import KeyTable, key_entry, new_key, parse_entry
from engine_node.gateway import Gateway
from engine_node.policy.intent import IntentClassifier
from engine_node.policy.rules import Policy
from tests.aiohttp_apps import start_app

CAP = 64
# The seed's whitelist (legal), naming the classifier's intent and a tag, in a pool bundle.
BUNDLE = {"whitelists": {"legal": ["legal_policy", "legal"]}, "overrides": []}
PARAMS = {"max_tokens": {"default": CAP, "whitelist": ["legal"], "hard_ceiling": 2048}, "batch": {"min_size": 1}}


class RecordingEngine:
    """Answers chat and completion requests with one short, finished choice; keeps every body it was sent."""

    def __init__(self):
        self.bodies: list[tuple[str, dict]] = []

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(("chat", body))
        usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        return web.json_response(
            {"id": "c1", "object": "chat.completion", "created": 1, "model": "m", "usage": usage,
             "choices": [{"index": 0, "message": {"role": "assistant", "content": "Done."}, "finish_reason": "stop"}]}
        )  # fmt: skip

    async def completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(("completions", body))
        usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        return web.json_response(
            {"id": "t1", "object": "text_completion", "created": 1, "model": "m", "usage": usage,
             "choices": [{"index": 0, "text": "Done.", "finish_reason": "stop"}]}
        )  # fmt: skip


class GatewayWorld:
    """`async with GatewayWorld(grants) as world`: a gateway on a free port, one client key per entry of `grants`
    (key name -> the business tags it is granted), the engine stand-in behind it."""

    def __init__(self, grants: dict[str, list[str]], *, params: dict | None = None, bundle: dict | None = None):
        self.keys = {name: new_key() for name in grants}
        self.engine = RecordingEngine()
        self.gateway = Gateway(
            engine_url=lambda: self.engine_url,
            admission=Admission(queue_timeout_s=5),
            status=lambda: {"status": "online"},
            node_name="security-node",
        )
        entries = [
            parse_entry(key_entry(self.keys[name], name=name, business_tags=tags)) for name, tags in grants.items()
        ]
        self.gateway.set_client_keys(KeyTable(entries))
        policy = Policy(params or PARAMS, bundle or BUNDLE, IntentClassifier.load())
        self.gateway.set_policy(policy, "security-test")
        self._runners: list[web.AppRunner] = []

    async def __aenter__(self) -> GatewayWorld:
        engine_app = web.Application()
        engine_app.router.add_post("/v1/chat/completions", self.engine.chat)
        engine_app.router.add_post("/v1/completions", self.engine.completions)
        self.engine_url = await self._serve(engine_app)
        self.url = await self._serve(self.gateway.app())
        self.http = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.close()
        for runner in reversed(self._runners):
            await runner.cleanup()

    async def _serve(self, app: web.Application) -> str:
        runner, url = await start_app(app)
        self._runners.append(runner)
        return url

    async def post(self, path: str, body: object, *, key: str, headers: dict | None = None) -> tuple[int, dict, dict]:
        """(status, response headers, JSON body) of a POST with the named key."""
        raw = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
        sent = {"Authorization": f"Bearer {self.keys[key]}", "Content-Type": "application/json", **(headers or {})}
        async with self.http.post(f"{self.url}{path}", data=raw, headers=sent) as response:
            return response.status, dict(response.headers), json.loads(await response.read())


def run(grants: dict[str, list[str]], scenario, **world_options):
    """Runs `await scenario(world)` against a fresh GatewayWorld; returns what it returns."""

    async def main():
        async with GatewayWorld(grants, **world_options) as world:
            return await scenario(world)

    return asyncio.run(main())
