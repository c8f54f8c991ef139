"""vLLM's OpenAI wire format: request validation with vLLM's error messages, and response and chunk bodies."""

import json
import time
import uuid
from dataclasses import dataclass

from aiohttp import web

from engine_node.simulator.text import chat_pieces, text_pieces


class ApiError(Exception):
    """A request vLLM would refuse; rendered as vLLM's `{"error": {message, type, param, code}}` body."""

    def __init__(
        self, status: int, message: str, error_type: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param

    def response(self) -> web.Response:
        """The error as an HTTP response."""
        return error_response(self.status, self.message, self.error_type, self.param)


def error_response(status: int, message: str, error_type: str, param: str | None = None) -> web.Response:
    """vLLM's ErrorResponse: `code` is the HTTP status as an integer."""
    body = {"error": {"message": message, "type": error_type, "param": param, "code": status}}
    return json_response(body, status=status)


def compact_json(value: object) -> str:
    """JSON as vLLM's pydantic models serialize it: no spaces, non-ASCII text kept as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_response(body: object, status: int = 200) -> web.Response:
    """A JSON response serialized compactly, as vLLM's server does."""
    return web.json_response(body, status=status, dumps=compact_json)


@dataclass(frozen=True)
class CompletionParams:
    """The parts of a chat or text completion request the simulator acts on."""

    is_chat: bool
    model: str
    pieces: list[str]
    seed_content: object
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    seed: int | None

    @property
    def prompt_tokens(self) -> int:
        """The simulated prompt length in tokens."""
        return len(self.pieces)


def parse_completion(body: object, *, is_chat: bool, served_names: list[str], max_model_len: int) -> CompletionParams:
    """Validate a request body as vLLM 0.32 would; raises ApiError."""
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    model = body.get("model") or served_names[0]
    if model not in served_names:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    if is_chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "messages: must be a non-empty list of message objects.", param="messages")
        pieces, seed_content = chat_pieces(messages), messages
    else:
        pieces, seed_content = _prompt_pieces(body.get("prompt")), body.get("prompt")
    n = body.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ApiError(400, f"n must be at least 1, got {n}.", param="n")
    if n > 1:
        raise ApiError(400, f"n={n} is not supported by the vLLM simulator; send n=1.", param="n")
    prompt_tokens = len(pieces)
    if prompt_tokens >= max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
            param="messages" if is_chat else "prompt",
        )
    max_tokens = body.get("max_completion_tokens") if is_chat else None
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = max_model_len - prompt_tokens
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    if prompt_tokens + max_tokens > max_model_len:
        raise ApiError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum context "
            f"length is {max_model_len} tokens and your request has {prompt_tokens} input tokens "
            f"({max_tokens} > {max_model_len} - {prompt_tokens}).",
            param="max_tokens",
        )
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.", param="stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "stream_options: must be an object.", param="stream_options")
    min_tokens = body.get("min_tokens", 0)
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or not 0 <= min_tokens <= max_tokens:
        raise ApiError(400, f"min_tokens must be between 0 and max_tokens={max_tokens}, got {min_tokens}.")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError(400, "seed: must be an integer.", param="seed")
    return CompletionParams(
        is_chat=is_chat,
        model=model,
        pieces=pieces,
        seed_content=seed_content,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_flag(body, "ignore_eos"),
        stream=stream,
        include_usage=bool(options and options.get("include_usage")),
        seed=seed,
    )


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise ApiError(400, f"{name}: must be true or false.", param=name)
    return value


def _prompt_pieces(prompt: object) -> list[str]:
    # One prompt per request: a string, a list of token ids, or a one-element list of either.
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return text_pieces(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return [str(token) for token in prompt]
    raise ApiError(
        400, "prompt: must be a non-empty string or list of token ids (one prompt per request).", param="prompt"
    )


class CompletionBodies:
    """Builds the bodies of one completion request, sharing its id, creation time and model name."""

    def __init__(self, params: CompletionParams) -> None:
        self.params = params
        self.id = ("chatcmpl-" if params.is_chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.object = "chat.completion" if params.is_chat else "text_completion"
        self.chunk_object = "chat.completion.chunk" if params.is_chat else "text_completion"

    def usage(self, completion_tokens: int) -> dict:
        """vLLM's usage object for this request."""
        prompt = self.params.prompt_tokens
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": None,
        }

    def response(self, text: str, finish_reason: str, completion_tokens: int) -> dict:
        """The non-streaming body."""
        if self.params.is_chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None,
                            "audio": None, "function_call": None, "tool_calls": [], "reasoning_content": None},
                "logprobs": None, "finish_reason": finish_reason, "stop_reason": None,
            }  # fmt: skip
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
                      "stop_reason": None, "prompt_logprobs": None}  # fmt: skip
        return {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.params.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": self.usage(completion_tokens),
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }

    def chunk(self, text: str, finish_reason: str | None = None, role: bool = False) -> dict:
        """One streaming chunk; the first chat chunk carries the assistant role and empty content."""
        if self.params.is_chat:
            delta = {"role": "assistant", "content": ""} if role else {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        if finish_reason:
            choice["stop_reason"] = None
        return {"id": self.id, "object": self.chunk_object, "created": self.created, "model": self.params.model,
                "choices": [choice]}  # fmt: skip

    def usage_chunk(self, completion_tokens: int) -> dict:
        """The last chunk before [DONE] when stream_options.include_usage is true."""
        return {"id": self.id, "object": self.chunk_object, "created": self.created, "model": self.params.model,
                "choices": [], "usage": self.usage(completion_tokens)}  # fmt: skip
