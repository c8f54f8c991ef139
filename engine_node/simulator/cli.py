"""Command line of `python -m engine_node.simulator`: vLLM's server flags, vLLM's start-up checks, then serve."""

import argparse
import logging
import sys

from aiohttp import web

from engine_node.simulator.model import SpeculativeConfig
from engine_node.simulator.profile import DEFAULT_PROFILE_PATH, Profile, ProfileError, load_profile
from engine_node.simulator.runtime import CRASH_EXIT_CODE, VERSION, Simulator, SimulatorSettings, num_gpu_blocks
from engine_node.simulator.server import build_app

GIB = 1 << 30
logger = logging.getLogger("engine_node.simulator")


class StartupError(Exception):
    """A configuration vLLM would refuse at start-up; printed as vLLM's final `ValueError: ...` line, exit 1."""


def parser() -> argparse.ArgumentParser:
    """The argument parser, with vLLM's flag names and a help line for each."""
    p = argparse.ArgumentParser(
        prog="python -m engine_node.simulator",
        description=(
            "vLLM-protocol simulator: serves the HTTP API of vLLM's OpenAI server (vllm.entrypoints.openai."
            "api_server) with simulated latency, continuous batching, paged KV cache, speculative decoding and "
            "fragmentation, and no GPU. Every response and metric is marked simulated. It accepts the vLLM flags "
            "below with vLLM's spelling; the last two are simulator-only."
        ),
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: the dev and /sim endpoints are unauthenticated)",
    )
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--model", default=None, help="model name to report (default: the profile's model)")
    p.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        help="name(s) clients use in the `model` field; the first one labels the metrics (default: --model)",
    )
    p.add_argument("--tokenizer", default=None, help="accepted for compatibility; prompts are never tokenized")
    p.add_argument("--revision", default=None, help="accepted for compatibility; no weights are loaded")
    p.add_argument("--tokenizer-revision", default=None, help="accepted for compatibility; no tokenizer is loaded")
    p.add_argument(
        "--trust-remote-code",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="accepted for compatibility; the simulator runs no model code",
    )
    p.add_argument("--max-num-seqs", type=int, default=256, help="most sequences in one running batch (default 256)")
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=8192,
        help="token budget of one engine step, prefill chunks and decode tokens together (default 8192)",
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="share of the profile's kv_cache_bytes given to KV blocks, in (0, 1] (default 0.9)",
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="prompt plus reply limit in tokens (default and upper bound: the profile's max_position_embeddings)",
    )
    p.add_argument(
        "--quantization",
        "-q",
        default=None,
        help="quantization method; must be in the profile's supported_quantizations (default: none)",
    )
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse KV blocks of prompt prefixes seen before (default: enabled, as in vLLM v1)",
    )
    p.add_argument(
        "--speculative-config",
        default=None,
        help='speculative decoding as JSON, e.g. \'{"method": "ngram", "num_speculative_tokens": 3}\' or '
        '\'{"method": "draft_model", "model": "m", "num_speculative_tokens": 3}\'',
    )
    p.add_argument("--enforce-eager", action="store_true", help="accepted for compatibility; no effect")
    # vLLM 0.32 dropped --disable-log-requests: request lines are off unless --enable-log-requests.
    p.add_argument(
        "--enable-log-requests",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="log a line per received request (off by default, as in vLLM 0.32)",
    )
    p.add_argument(
        "--profile",
        default=str(DEFAULT_PROFILE_PATH),
        help="simulator-only: YAML profile of the simulated model and GPU; keys it omits come from the "
        "packaged default (default: %(default)s)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of reply lengths, texts, draft acceptances and error_rate faults; the same seed and "
        "requests give the same token counts (default 0)",
    )
    return p


def settings_from(args: argparse.Namespace, profile: Profile) -> SimulatorSettings:
    """Apply defaults and vLLM's start-up checks; raises StartupError."""
    try:
        speculative = SpeculativeConfig.parse(args.speculative_config) if args.speculative_config else None
    except ValueError as exc:
        raise StartupError(str(exc)) from exc
    derived = profile.max_position_embeddings
    max_model_len = derived if args.max_model_len is None else args.max_model_len
    if max_model_len > derived:
        raise StartupError(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={derived} or model_max_length=None in model's config.json). (simulated)"
        )
    if args.quantization and args.quantization not in profile.supported_quantizations:
        raise StartupError(
            f"Quantization method specified in the model config (None) does not match the quantization method "
            f"specified in the `quantization` argument ({args.quantization}). The simulated checkpoint supports "
            f"{sorted(profile.supported_quantizations) or 'no quantization'}. (simulated)"
        )
    _check_positive(
        max_model_len=max_model_len, max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens
    )
    if not 0 < args.gpu_memory_utilization <= 1:
        raise StartupError(f"GPU memory utilization must be within (0, 1]. Got {args.gpu_memory_utilization}.")
    draft = speculative.num_speculative_tokens if speculative else 0
    if args.max_num_batched_tokens <= draft:
        raise StartupError(
            f"max_num_batched_tokens ({args.max_num_batched_tokens}) must exceed num_speculative_tokens ({draft})."
        )
    _check_kv_cache(profile, args.gpu_memory_utilization, max_model_len + draft)
    model = args.model or profile.model
    return SimulatorSettings(
        host=args.host,
        port=args.port,
        model=model,
        served_model_names=args.served_model_name or [model],
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=max_model_len,
        quantization=args.quantization,
        enable_prefix_caching=args.enable_prefix_caching,
        speculative=speculative,
        seed=args.seed,
        log_requests=args.enable_log_requests,
    )


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise StartupError(f"{name} must be at least 1, got {value}.")


def _check_kv_cache(profile: Profile, gpu_memory_utilization: float, max_seq_len: int) -> None:
    blocks = num_gpu_blocks(profile, gpu_memory_utilization)
    capacity = blocks * profile.block_size
    if capacity < max_seq_len:
        needed = max_seq_len * profile.bytes_per_token / GIB
        available = blocks * profile.bytes_per_block / GIB
        raise StartupError(
            f"To serve at least one request with the models's max seq len ({max_seq_len}), ({needed:.2f} GiB KV "
            f"cache is needed, which is larger than the available KV cache memory ({available:.2f} GiB). Based on "
            f"the available memory, the estimated maximum model length is {capacity}. Try increasing "
            f"`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. (simulated)"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGINT or SIGTERM; 1 on a refused configuration, 70 on a start-up crash fault."""
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(levelname)s %(asctime)s [vllm-simulator] %(message)s",
        datefmt="%m-%d %H:%M:%S",
        stream=sys.stdout,
    )
    try:
        profile = load_profile(args.profile)
        settings = settings_from(args, profile)
    except (ProfileError, StartupError) as exc:
        print(f"ValueError: {exc}", file=sys.stderr)
        return 1
    if profile.faults.crash:
        logger.error("Engine core failed to start: simulated crash fault (simulated)")
        return CRASH_EXIT_CODE
    simulator = Simulator(settings, profile)
    logger.info("vLLM API server version %s (simulated), profile %s", VERSION, args.profile)
    logger.info(
        "Simulated KV cache: %d blocks of %d tokens (%d tokens), max_model_len %d, speculative %s (simulated)",
        simulator.engine.pool.num_blocks,
        profile.block_size,
        simulator.engine.pool.num_blocks * profile.block_size,
        settings.max_model_len,
        settings.speculative,
    )
    logger.info(
        "Serving %s as %s on http://%s:%d (simulated)",
        settings.model,
        settings.served_model_names,
        settings.host,
        settings.port,
    )
    try:
        web.run_app(
            build_app(simulator),
            host=settings.host,
            port=settings.port,
            print=None,
            access_log=None,
            handler_cancellation=True,
            shutdown_timeout=2.0,
        )
    except OSError as exc:
        print(f"OSError: cannot listen on {settings.host}:{settings.port}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0
