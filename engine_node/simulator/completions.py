"""POST /v1/chat/completions and /v1/completions: vLLM's responses and SSE streams, fed by the simulated engine."""

import asyncio
import json
import logging

from aiohttp import web

from engine_node.simulator.protocol import (
    ApiError,
    CompletionBodies,
    CompletionParams,
    compact_json,
    error_response,
    json_response,
    parse_completion,
)
from engine_node.simulator.runtime import SIMULATOR
from engine_node.simulator.sequence import Sequence, new_sequence

logger = logging.getLogger("engine_node.simulator")


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """POST /v1/chat/completions."""
    return await _complete(request, is_chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    """POST /v1/completions."""
    return await _complete(request, is_chat=False)


async def _complete(request: web.Request, *, is_chat: bool) -> web.StreamResponse:
    simulator = request.app[SIMULATOR]
    settings = simulator.settings
    if simulator.engine.is_sleeping:
        return error_response(
            503, "The engine is sleeping (simulated); POST /wake_up first.", "ServiceUnavailableError"
        )
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error_response(400, "The request body is not valid JSON.", "BadRequestError")
    try:
        params = parse_completion(
            body, is_chat=is_chat, served_names=settings.served_model_names, max_model_len=settings.max_model_len
        )
    except ApiError as exc:
        return exc.response()
    if simulator.faults.hang:
        # A wedged engine: the request is accepted and never answered; the client's timeout ends it.
        await asyncio.Event().wait()
    if simulator.should_fail():
        return error_response(500, "Simulated engine failure (error_rate fault).", "InternalServerError")
    bodies = CompletionBodies(params)
    sequence = new_sequence(
        request_id=bodies.id,
        prompt_tokens=params.prompt_tokens,
        block_hashes=simulator.engine.prefix_cache.block_hashes(params.pieces) if simulator.engine.prefix_cache else [],
        seed_content=params.seed_content,
        request_seed_param=params.seed,
        max_tokens=params.max_tokens,
        min_tokens=params.min_tokens,
        ignore_eos=params.ignore_eos,
        simulator_seed=settings.seed,
        profile=simulator.profile,
    )
    if settings.log_requests:
        logger.info(
            "Received request %s: prompt_tokens=%d, max_tokens=%d (simulated)",
            bodies.id,
            params.prompt_tokens,
            params.max_tokens,
        )
    simulator.engine.add(sequence)
    try:
        if params.stream:
            return await _stream(request, params, bodies, sequence)
        return await _collect(bodies, sequence)
    finally:
        # The client went away (or the handler failed) before the reply was complete.
        simulator.engine.abort(sequence)


async def _collect(bodies: CompletionBodies, sequence: Sequence) -> web.Response:
    parts: list[str] = []
    while True:
        output = await sequence.outputs.get()
        parts.append(output.text)
        if output.finish_reason:
            return json_response(bodies.response("".join(parts), output.finish_reason, sequence.num_output))


async def _stream(
    request: web.Request, params: CompletionParams, bodies: CompletionBodies, sequence: Sequence
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    if params.is_chat:
        await _send(response, bodies.chunk("", role=True))
    while True:
        output = await sequence.outputs.get()
        await _send(response, bodies.chunk(output.text, output.finish_reason))
        if output.finish_reason:
            break
    if params.include_usage:
        await _send(response, bodies.usage_chunk(sequence.num_output))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _send(response: web.StreamResponse, chunk: dict) -> None:
    await response.write(f"data: {compact_json(chunk)}\n\n".encode())
