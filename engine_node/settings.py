"""The agent's settings, from command-line flags with environment-variable defaults."""

import argparse
import ipaddress
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from engine_node.engine_flags import FlagRefused, check_value

# A sample's window longer than this would mix a config change into minutes of samples after it.
MAX_SAMPLE_WINDOW_S = 300.0
# A 70B model's first start on a GPU host: loading ~140 GB of weights, torch.compile with a cold cache, CUDA-graph
# capture, under tensor parallelism: 10-15 minutes is not unusual. Only a start that hangs waits this long; one that
# exits fails at once. Downloads are not in it: a node that fetches a repo id at start needs more.
START_TIMEOUT_S = 1200.0


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
    start_timeout_s: float = START_TIMEOUT_S
    probe_interval_s: float = 10.0
    sample_window_s: float = 10.0
    probe_timeout_s: float = 15.0
    session_redis_url: str = ""
    session_grace_s: float = 5.0
    session_ttl_s: float = 120.0
    client_keys_file: Path | None = None
    model_dirs: list[Path] = field(default_factory=list)
    allowed_models: list[str] = field(default_factory=list)
    allow_trust_remote_code: bool = False
    engine_env: list[str] = field(default_factory=list)
    insecure_control_plane: bool = False
    dcgm_exporter_url: str = ""

    @property
    def control_plane_urls(self) -> list[str]:
        """`control_plane_url` as a list: one URL, or the processes of one control plane to fail over between."""
        return split_urls(self.control_plane_url)


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def _env_bool(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise SystemExit(f"{name}: must be 1/true/yes/on or 0/false/no/off, got {os.environ[name]!r}")


def _env_list(name: str, separator: str | None = None) -> list[str]:
    return [item.strip() for item in _env(name).split(separator) if item.strip()]


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
        help="WebSocket URL of the control plane's agent endpoint, e.g. wss://cp.example.com/ws/agent/ "
        "(ws:// only to a loopback address unless --insecure-control-plane), or several separated by commas "
        "(processes of one control plane: the agent fails over between them) [ENGINE_NODE_CONTROL_PLANE_URL]; "
        "empty runs stand-alone on the last good config",
    )
    p.add_argument(
        "--insecure-control-plane",
        action="store_true",
        default=_env_bool("ENGINE_NODE_INSECURE_CONTROL_PLANE"),
        help="allow plain ws:// to a control plane that is not on this host: the node token and every config "
        "then cross the network in clear text [ENGINE_NODE_INSECURE_CONTROL_PLANE]",
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
        help="the node's own model (path or repo id): what vLLM runs when the template leaves engine.model "
        "empty; always allowed [ENGINE_NODE_MODEL]",
    )
    p.add_argument(
        "--model-dir",
        action="append",
        default=_env_list("ENGINE_NODE_MODEL_DIRS", os.pathsep),
        help="directory whose models a pushed config may name (by absolute path, resolved with every symlink, "
        "staying inside it); repeatable [ENGINE_NODE_MODEL_DIRS, separated by " + os.pathsep + "]",
    )
    p.add_argument(
        "--allow-model",
        action="append",
        default=_env_list("ENGINE_NODE_ALLOW_MODELS"),
        help="a Hugging Face repo id (or exact path) a pushed config may name, besides --model and the models "
        "under --model-dir; repeatable. Anything else is NACKed [ENGINE_NODE_ALLOW_MODELS, space-separated]",
    )
    p.add_argument(
        "--allow-trust-remote-code",
        action="store_true",
        default=_env_bool("ENGINE_NODE_ALLOW_TRUST_REMOTE_CODE"),
        help="accept catalog models whose trust_remote_code an admin turned on (vLLM then runs Python code from "
        "the model's repository); off: such configs are NACKed [ENGINE_NODE_ALLOW_TRUST_REMOTE_CODE]",
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
        help="extra base flag passed to vLLM on every start as given (the operator's own, outside the option table "
        "configs are held to), repeatable, e.g. --engine-arg=--enforce-eager "
        "[ENGINE_NODE_ENGINE_ARGS, space-separated]",
    )
    p.add_argument(
        "--engine-env",
        action="append",
        default=_env_list("ENGINE_NODE_ENGINE_ENV"),
        help="name of an environment variable passed to the engine besides the built-in list (PATH, HOME, LANG, "
        "LC_*, VLLM_*, CUDA_*, HF_*, ...); repeatable; ENGINE_NODE_* never is [ENGINE_NODE_ENGINE_ENV, "
        "space-separated]",
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
        default=float(_env("ENGINE_NODE_START_TIMEOUT_S", str(int(START_TIMEOUT_S)))),
        help="seconds the engine may take to serve its first request; an engine that exits fails at once "
        "[ENGINE_NODE_START_TIMEOUT_S]",
    )
    p.add_argument(
        "--probe-interval",
        type=float,
        default=float(_env("ENGINE_NODE_PROBE_INTERVAL_S", "10")),
        help="seconds between liveness probes, each a real 1-token request [ENGINE_NODE_PROBE_INTERVAL_S]",
    )
    p.add_argument(
        "--sample-window",
        type=float,
        default=float(_env("ENGINE_NODE_SAMPLE_WINDOW_S", "10")),
        help="seconds of requests each 1 Hz sample's latency and rate figures cover; the control plane's "
        "METRICS_SAMPLE_WINDOW_S must say the same [ENGINE_NODE_SAMPLE_WINDOW_S]",
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
    p.add_argument(
        "--client-keys-file",
        default=_env("ENGINE_NODE_CLIENT_KEYS_FILE"),
        help="JSON file of client (and scrape) keys, as sha256 hashes, accepted besides the pool's keys from the "
        "control plane; what a stand-alone node serves with. Make one with `python -m engine_node.client_keys new`. "
        "Without either, every /v1 request gets 401 [ENGINE_NODE_CLIENT_KEYS_FILE]",
    )
    p.add_argument(
        "--dcgm-exporter-url",
        default=_env("ENGINE_NODE_DCGM_EXPORTER_URL"),
        help="metrics URL of a DCGM exporter on this host, e.g. http://127.0.0.1:9400/metrics: the sample's SM "
        "activity is its DCGM_FI_PROF_SM_ACTIVE; empty leaves SM activity null with the reason "
        "[ENGINE_NODE_DCGM_EXPORTER_URL]",
    )
    return p


def split_urls(value: str) -> list[str]:
    """The URLs of a comma-separated --control-plane-url, blanks dropped, each once, in order."""
    urls: list[str] = []
    for part in (value or "").split(","):
        part = part.strip()
        if part and part not in urls:
            urls.append(part)
    return urls


def control_plane_url_problem(url: str, *, insecure: bool) -> str | None:
    """Why the agent refuses to connect to `url`, or None: wss:// always, ws:// only to loopback unless `insecure`."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        return f"{url!r} must be a ws:// or wss:// URL with a host"
    if parts.scheme == "ws" and not insecure and not _is_loopback(parts.hostname):
        return (
            f"ws:// to {parts.hostname} would send the node token and every config in clear text; use wss:// "
            "(TLS), or pass --insecure-control-plane (ENGINE_NODE_INSECURE_CONTROL_PLANE=1) on a trusted network"
        )
    return None


def _is_loopback(host: str) -> bool:
    """Traffic to this host never leaves the machine: loopback, `localhost`, or the unspecified address (0.0.0.0,
    which `make run` uses when it listens on every interface and which Linux connects to locally)."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


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
    for url in split_urls(args.control_plane_url):
        problem = control_plane_url_problem(url, insecure=args.insecure_control_plane)
        if problem:
            parser().error(f"--control-plane-url: {problem}")
    if not 1 <= args.sample_window <= MAX_SAMPLE_WINDOW_S:
        parser().error(
            f"--sample-window (or ENGINE_NODE_SAMPLE_WINDOW_S): expected 1 to {MAX_SAMPLE_WINDOW_S:g} seconds, "
            f"got {args.sample_window:g}"
        )
    if args.control_plane_url and not split_urls(args.control_plane_url):
        parser().error(f"--control-plane-url: {args.control_plane_url!r} names no URL")
    try:
        for flag, value in (("--model", args.model), ("--served-model-name", args.served_model_name)):
            if value:
                check_value(flag, value)
    except FlagRefused as exc:
        parser().error(str(exc))
    for name in args.engine_env or []:
        if name.startswith("ENGINE_NODE_"):
            parser().error(f"--engine-env: {name} is the agent's own setting; it never reaches the engine")
    if args.advertise_url and not valid_advertise_url(args.advertise_url):
        parser().error(
            f"--advertise-url (or ENGINE_NODE_ADVERTISE_URL): expected http(s)://host[:port][/path], "
            f"got {args.advertise_url!r}"
        )
    if args.dcgm_exporter_url and not valid_advertise_url(args.dcgm_exporter_url):
        parser().error(
            f"--dcgm-exporter-url (or ENGINE_NODE_DCGM_EXPORTER_URL): expected http(s)://host[:port][/path], "
            f"got {args.dcgm_exporter_url!r}"
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
        sample_window_s=args.sample_window,
        session_redis_url=args.session_redis_url,
        session_grace_s=args.session_grace,
        session_ttl_s=args.session_ttl,
        client_keys_file=Path(args.client_keys_file) if args.client_keys_file else None,
        model_dirs=[Path(d) for d in args.model_dir or []],
        allowed_models=list(args.allow_model or []),
        allow_trust_remote_code=args.allow_trust_remote_code,
        engine_env=list(args.engine_env or []),
        insecure_control_plane=args.insecure_control_plane,
        dcgm_exporter_url=args.dcgm_exporter_url,
    )
