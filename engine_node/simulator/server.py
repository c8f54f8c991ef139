"""The simulator's HTTP app: vLLM's routes (OpenAI API, health, metrics, dev-mode endpoints) plus /sim/*."""

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4

from engine_node.simulator.completions import chat_completions, completions
from engine_node.simulator.profile import Faults, ProfileError
from engine_node.simulator.protocol import error_response, json_response
from engine_node.simulator.runtime import SIMULATOR, VERSION, Simulator, crash

# Lets the reply to the crash request leave before the process dies.
CRASH_DELAY_S = 0.05
logger = logging.getLogger("engine_node.simulator")


def build_app(simulator: Simulator) -> web.Application:
    """The aiohttp application serving one simulator; the engine loop runs for the app's lifetime."""
    app = web.Application()
    app[SIMULATOR] = simulator
    app.on_response_prepare.append(_mark_simulated)
    app.cleanup_ctx.append(_engine_tasks)
    app.add_routes(
        [
            web.post("/v1/chat/completions", chat_completions),
            web.post("/v1/completions", completions),
            web.get("/v1/models", models),
            web.get("/health", health),
            web.get("/version", version),
            web.get("/metrics", metrics),
            web.post("/reset_prefix_cache", reset_prefix_cache),
            web.post("/sleep", sleep),
            web.post("/wake_up", wake_up),
            web.get("/is_sleeping", is_sleeping),
            web.post("/collective_rpc", collective_rpc),
            web.get("/sim/faults", get_faults),
            web.post("/sim/faults", post_faults),
            web.delete("/sim/faults", delete_faults),
            web.get("/sim/state", state),
        ]
    )
    return app


async def _mark_simulated(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["X-Simulated"] = "true"


async def _engine_tasks(app: web.Application) -> AsyncIterator[None]:
    engine = app[SIMULATOR].engine
    tasks = [asyncio.create_task(engine.run()), asyncio.create_task(engine.log_stats())]
    tasks[0].add_done_callback(_engine_died)
    yield
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _engine_died(task: asyncio.Task) -> None:
    # Like vLLM after EngineDeadError: a server whose engine loop is gone must not keep accepting requests.
    if not task.cancelled() and task.exception() is not None:
        logger.error("Engine loop failed", exc_info=task.exception())
        crash("engine loop raised an exception", exit_code=1)


async def models(request: web.Request) -> web.Response:
    """GET /v1/models: one card per served model name."""
    settings = request.app[SIMULATOR].settings
    created = int(time.time())
    cards = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm-simulator",
            "root": settings.model,
            "parent": None,
            "max_model_len": settings.max_model_len,
            "permission": [],
        }
        for name in settings.served_model_names
    ]
    return json_response({"object": "list", "data": cards})


async def health(request: web.Request) -> web.Response:
    """GET /health: 200, or 503 under the unhealthy fault."""
    if request.app[SIMULATOR].faults.unhealthy:
        return web.Response(status=503)
    return web.Response(status=200)


async def version(request: web.Request) -> web.Response:
    """GET /version."""
    return json_response({"version": VERSION, "simulated": True})


async def metrics(request: web.Request) -> web.Response:
    """GET /metrics."""
    simulator = request.app[SIMULATOR]
    simulator.engine.update_gauges()
    return web.Response(body=simulator.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    """POST /reset_prefix_cache."""
    request.app[SIMULATOR].engine.reset_prefix_cache()
    return web.Response(status=200)


async def sleep(request: web.Request) -> web.Response:
    """POST /sleep?level=1|2: discard the KV cache and refuse completions until /wake_up."""
    try:
        level = int(request.query.get("level", "1"))
    except ValueError:
        return error_response(400, "level: must be 1 or 2.", "BadRequestError", "level")
    if level not in (1, 2):
        return error_response(400, "level: must be 1 or 2.", "BadRequestError", "level")
    request.app[SIMULATOR].engine.sleep(level)
    return web.Response(status=200)


async def wake_up(request: web.Request) -> web.Response:
    """POST /wake_up."""
    request.app[SIMULATOR].engine.wake_up()
    return web.Response(status=200)


async def is_sleeping(request: web.Request) -> web.Response:
    """GET /is_sleeping."""
    return json_response({"is_sleeping": request.app[SIMULATOR].engine.is_sleeping})


async def collective_rpc(request: web.Request) -> web.Response:
    """The simulated workers know the agent's worker-extension methods: "fragmentation_stats" and
    "release_cached_blocks" (the simulated torch.cuda.empty_cache)."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error_response(400, "The request body is not valid JSON.", "BadRequestError")
    method = body.get("method") if isinstance(body, dict) else None
    engine = request.app[SIMULATOR].engine
    if method == "fragmentation_stats":
        stats = engine.pool.fragmentation_stats()
        # vLLM answers {"results": [one per worker]}; the stats are also at the top level for direct readers.
        return json_response({**stats, "results": [stats]})
    if method == "release_cached_blocks":
        result = {"released_blocks": engine.pool.release_memory(), "simulated": True}
        engine.update_gauges()
        return json_response({"results": [result]})
    return error_response(400, f"Unsupported collective_rpc method {method!r} (simulated).", "BadRequestError")


async def get_faults(request: web.Request) -> web.Response:
    """GET /sim/faults."""
    return json_response(request.app[SIMULATOR].faults.as_dict())


async def post_faults(request: web.Request) -> web.Response:
    """POST /sim/faults: merge the given keys into the faults in force."""
    simulator = request.app[SIMULATOR]
    try:
        faults = simulator.faults.updated(await request.json())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error_response(400, "The request body is not valid JSON.", "BadRequestError")
    except ProfileError as exc:
        return error_response(400, str(exc), "BadRequestError")
    simulator.set_faults(faults)
    if faults.crash:
        asyncio.get_running_loop().call_later(CRASH_DELAY_S, crash)
    return json_response(faults.as_dict())


async def delete_faults(request: web.Request) -> web.Response:
    """Clear every fault, including those set by the profile or SIMULATOR_FAULTS."""
    simulator = request.app[SIMULATOR]
    simulator.set_faults(Faults())
    return json_response(simulator.faults.as_dict())


async def state(request: web.Request) -> web.Response:
    """GET /sim/state."""
    return json_response(request.app[SIMULATOR].engine.state())
