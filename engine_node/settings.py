"""The agent's settings, from command-line flags with environment-variable defaults."""

import argparse
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit


@dataclass(frozen=True)
class AgentSettings:
    """Everything the agent needs to run one engine and connect to the control plane."""

    control_plane_url: str
    token: str
    node_name: str
    backend: str
    model: str
    served_model_name: str
    engine_args: list[str] = field(default_factory=list)
    engine_python: str = "python3"
    simulator_profile: str = ""
    host: str = "127.0.0.1"
    port: int = 9000
    advertise_url: str = ""
    engine_port: int = 0
    state_dir: Path = Path("var/engine-node")
    drain_timeout_s: float = 30.0
    queue_timeout_s: float = 30.0
    start_timeout_s: float = 300.0
    probe_interval_s: float = 10.0
    probe_timeout_s: float = 15.0
    session_redis_url: str = ""
    session_grace_s: float = 5.0
    session_ttl_s: float = 120.0


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m engine_node",
        description=(
            "Engine-node agent: runs vLLM (or the vLLM-protocol simulator) behind an OpenAI-compatible "
            "gateway, applies the configs the control plane pushes, and answers ACK or NACK. "
            "Every flag can also be set by the environment variable named in its help."
        ),
    )
    p.add_argument(
        "--control-plane-url",
        default=_env("ENGINE_NODE_CONTROL_PLANE_URL"),
        help="WebSocket URL of the control plane's agent endpoint, e.g. ws://cp:8000/ws/agent/ "
        "[ENGINE_NODE_CONTROL_PLANE_URL]; empty runs stand-alone on the last good config",
    )
    p.add_argument(
        "--token",
        default=_env("ENGINE_NODE_TOKEN"),
        help="node token issued in the dashboard (shown once) [ENGINE_NODE_TOKEN]",
    )
    p.add_argument(
        "--node-name",
        default=_env("ENGINE_NODE_NAME", socket.gethostname()),
        help="name of this node as registered in the control plane [ENGINE_NODE_NAME]",
    )
    p.add_argument(
        "--backend",
        choices=["vllm", "simulator"],
        default=_env("ENGINE_NODE_BACKEND", "vllm"),
        help="vllm: supervise vLLM's OpenAI server; simulator: the vLLM-protocol simulator "
        "(simulated numbers, for demos, load tests and CI) [ENGINE_NODE_BACKEND]",
    )
    p.add_argument(
        "--model",
        default=_env("ENGINE_NODE_MODEL"),
        help="model path or name given to vLLM unless the template sets engine.model [ENGINE_NODE_MODEL]",
    )
    p.add_argument(
        "--served-model-name",
        default=_env("ENGINE_NODE_SERVED_MODEL_NAME"),
        help="model name clients send, unless the template sets engine.served_model_name "
        "[ENGINE_NODE_SERVED_MODEL_NAME]",
    )
    p.add_argument(
        "--engine-arg",
        action="append",
        default=_env("ENGINE_NODE_ENGINE_ARGS").split(),
        help="extra base flag passed to vLLM on every start, repeatable, e.g. --engine-arg=--enforce-eager "
        "[ENGINE_NODE_ENGINE_ARGS, space-separated]",
    )
    p.add_argument(
        "--engine-python",
        default=_env("ENGINE_NODE_ENGINE_PYTHON", "python3"),
        help="Python interpreter that has vLLM installed [ENGINE_NODE_ENGINE_PYTHON]",
    )
    p.add_argument(
        "--simulator-profile",
        default=_env("ENGINE_NODE_SIMULATOR_PROFILE"),
        help="YAML latency profile of the simulator backend [ENGINE_NODE_SIMULATOR_PROFILE]",
    )
    p.add_argument(
        "--host",
        default=_env("ENGINE_NODE_HOST", "127.0.0.1"),
        help="address the gateway listens on [ENGINE_NODE_HOST]",
    )
    p.add_argument(
        "--port",
        type=int,
        default=int(_env("ENGINE_NODE_PORT", "9000")),
        help="port of the gateway: OpenAI-compatible /v1, /metrics, /healthz [ENGINE_NODE_PORT]",
    )
    p.add_argument(
        "--advertise-url",
        default=_env("ENGINE_NODE_ADVERTISE_URL"),
        help="base URL at which clients reach this gateway, e.g. https://gpu-1.example.com:9000, reported to the "
        "control plane and shown on the node's page; default http://<host>:<port> (the host name when --host "
        "listens on every interface) [ENGINE_NODE_ADVERTISE_URL]",
    )
    p.add_argument(
        "--engine-port",
        type=int,
        default=int(_env("ENGINE_NODE_ENGINE_PORT", "0")),
        help="port of the engine on 127.0.0.1 (0 picks a free one); the engine is never exposed "
        "beyond loopback because vLLM's dev endpoints are unauthenticated [ENGINE_NODE_ENGINE_PORT]",
    )
    p.add_argument(
        "--state-dir",
        default=_env("ENGINE_NODE_STATE_DIR", "var/engine-node"),
        help="where the last good config is kept for start-ups without the control plane [ENGINE_NODE_STATE_DIR]",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=float(_env("ENGINE_NODE_DRAIN_TIMEOUT_S", "30")),
        help="seconds to let in-flight requests finish before a restart [ENGINE_NODE_DRAIN_TIMEOUT_S]",
    )
    p.add_argument(
        "--queue-timeout",
        type=float,
        default=float(_env("ENGINE_NODE_QUEUE_TIMEOUT_S", "30")),
        help="seconds a request waits while the engine restarts before it gets 503 with Retry-After "
        "[ENGINE_NODE_QUEUE_TIMEOUT_S]",
    )
    p.add_argument(
        "--start-timeout",
        type=float,
        default=float(_env("ENGINE_NODE_START_TIMEOUT_S", "300")),
        help="seconds the engine may take to serve its first request [ENGINE_NODE_START_TIMEOUT_S]",
    )
    p.add_argument(
        "--probe-interval",
        type=float,
        default=float(_env("ENGINE_NODE_PROBE_INTERVAL_S", "10")),
        help="seconds between liveness probes, each a real 1-token request [ENGINE_NODE_PROBE_INTERVAL_S]",
    )
    p.add_argument(
        "--session-redis-url",
        default=_env("ENGINE_NODE_SESSION_REDIS_URL"),
        help="Redis for stream sessions (seed and generated chunks, for resume); empty keeps them in memory "
        "[ENGINE_NODE_SESSION_REDIS_URL]",
    )
    p.add_argument(
        "--session-grace",
        type=float,
        default=float(_env("ENGINE_NODE_SESSION_GRACE_S", "5")),
        help="seconds a dropped stream keeps generating for the client to resume it (the seed's 5 s) "
        "[ENGINE_NODE_SESSION_GRACE_S]",
    )
    p.add_argument(
        "--session-ttl",
        type=float,
        default=float(_env("ENGINE_NODE_SESSION_TTL_S", "120")),
        help="seconds a finished or interrupted stream stays replayable [ENGINE_NODE_SESSION_TTL_S]",
    )
    return p


def valid_advertise_url(url: str) -> bool:
    """An absolute http(s) URL with a host, no credentials, query or fragment: what a client's base URL looks like."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and not (parts.username or parts.password or parts.query or parts.fragment)
        and url.isprintable()
        and " " not in url
        and len(url) <= 500
    )


def gateway_url(settings: AgentSettings, port: int) -> str:
    """The base URL clients reach the gateway at: --advertise-url, else the listening address."""
    if settings.advertise_url:
        return settings.advertise_url
    host = settings.host
    if host in ("", "0.0.0.0", "::"):  # noqa: S104 - a comparison: a wildcard listener advertises the host name
        host = socket.getfqdn()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def from_args(argv: list[str] | None = None) -> AgentSettings:
    args = parser().parse_args(argv)
    if args.backend == "vllm" and not args.model:
        parser().error("--model (or ENGINE_NODE_MODEL) is required with --backend vllm")
    if args.advertise_url and not valid_advertise_url(args.advertise_url):
        parser().error(
            f"--advertise-url (or ENGINE_NODE_ADVERTISE_URL): expected http(s)://host[:port][/path], "
            f"got {args.advertise_url!r}"
        )
    return AgentSettings(
        control_plane_url=args.control_plane_url,
        token=args.token,
        node_name=args.node_name,
        backend=args.backend,
        model=args.model or "simulated-chat-model",
        served_model_name=args.served_model_name or "",
        engine_args=list(args.engine_arg or []),
        engine_python=args.engine_python,
        simulator_profile=args.simulator_profile,
        host=args.host,
        port=args.port,
        advertise_url=args.advertise_url.rstrip("/"),
        engine_port=args.engine_port,
        state_dir=Path(args.state_dir),
        drain_timeout_s=args.drain_timeout,
        queue_timeout_s=args.queue_timeout,
        start_timeout_s=args.start_timeout,
        probe_interval_s=args.probe_interval,
        session_redis_url=args.session_redis_url,
        session_grace_s=args.session_grace,
        session_ttl_s=args.session_ttl,
    )
