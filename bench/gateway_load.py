"""The gateway bench's load generation: the requests (the same for the direct and the gateway target), open-loop
and closed-loop levels, and the HTTP part's run. Part of bench/gateway.py (run that)."""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from gateway_agent import CLIENT_KEY, MODEL, REQUEST_TIMEOUT_S, SYSTEM_PROMPT, AgentUnderTest, pick_port, process_cpu_s  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from engine_node import openai_api  # noqa: E402
from engine_node.admission import IN_FLIGHT_PER_MAX_BATCH  # noqa: E402
from engine_node.forwarding import apply_decision  # noqa: E402
from engine_node.policy.dataset import load_examples  # noqa: E402
from engine_node.policy.intent import IntentClassifier  # noqa: E402
from engine_node.policy.rules import Policy  # noqa: E402
from engine_node.request_types import encode_body  # noqa: E402

# --- load generation ----------------------------------------------------------------------------------------------


@dataclass
class Request:
    """One message as a client sends it to the gateway, and as the gateway forwards it to the engine."""

    gateway_body: bytes
    direct_body: bytes
    temperature: float
    max_tokens: int | None


@dataclass
class Sample:
    latency_s: float
    status: int
    completion_tokens: int = 0
    continuation_rounds: int = 0
    policy_mismatch: bool = False
    lag_s: float = 0.0
    ended_at: float = 0.0


@dataclass
class Side:
    """What one target (direct or gateway) collected over the slices of one load level."""

    samples: list[Sample] = field(default_factory=list)
    completed_in_window: int = 0
    window_s: float = 0.0

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.status == 200]

    def latency_ms(self, q: float) -> float:
        return percentile([s.latency_s for s in self.ok], q) * 1000

    @property
    def throughput(self) -> float:
        return self.completed_in_window / self.window_s if self.window_s else 0.0

    @property
    def errors(self) -> Counter:
        return Counter(s.status for s in self.samples if s.status != 200)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def build_requests(policy: Policy, count: int, seed: int, *, stream: bool = False) -> list[Request]:
    """A seeded sample of dataset messages; the direct body gets the gateway's temperature and max_tokens. Streams
    ask for the usage chunk (counted like JSON replies' usage)."""
    examples = load_examples()
    rng = random.Random(seed)
    picked = rng.sample(examples, min(count, len(examples)))
    requests = []
    for example in picked:
        client = {
            "model": MODEL,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": example.text}],
            "temperature": 1.0,
            **({"stream": True, "stream_options": {"include_usage": True}} if stream else {}),
        }
        raw = openai_api.compact_json(client).encode("utf-8")
        chat = openai_api.parse_chat(raw, {})
        decision = policy.decide(
            chat.latest_user_text,
            prompt_tokens=chat.prompt_tokens,
            client_max_tokens=chat.client_max_tokens,
            business_tag=chat.business_tag,
            conversation=chat.conversation,
            message_texts=chat.message_texts,
        )
        forwarded = apply_decision(chat.body, decision)
        requests.append(Request(raw, encode_body(forwarded), decision.temperature, decision.max_tokens))
    return requests


class Target:
    def __init__(self, name: str, base_url: str, via_gateway: bool):
        self.name = name
        self.url = f"{base_url}/v1/chat/completions"
        self.via_gateway = via_gateway
        self.headers = {"Content-Type": "application/json"}
        if via_gateway:
            self.headers["Authorization"] = f"Bearer {CLIENT_KEY}"
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def send(self, request: Request, lag_s: float = 0.0) -> Sample:
        body = request.gateway_body if self.via_gateway else request.direct_body
        started = time.perf_counter()
        try:
            async with self.session.post(self.url, data=body, headers=self.headers) as r:
                raw = await r.read()
                ended = time.perf_counter()
                status, headers = r.status, r.headers
        except (aiohttp.ClientError, TimeoutError):
            ended = time.perf_counter()
            return Sample(ended - started, 599, lag_s=lag_s, ended_at=ended)
        sample = Sample(ended - started, status, lag_s=lag_s, ended_at=ended)
        if status == 200:
            sample.completion_tokens = completion_tokens(raw)
            if self.via_gateway:
                sample.continuation_rounds = int(headers.get("X-Continuation-Rounds", 0))
                expected = (f"{request.temperature:g}", str(request.max_tokens))
                sample.policy_mismatch = (headers.get("X-Policy-Temperature"), headers.get("X-Policy-Max-Tokens")) != (
                    expected
                )
        return sample


def completion_tokens(raw: bytes) -> int:
    """From a JSON reply, or from the usage chunk of an SSE stream (0 when the client did not ask for it)."""
    if not raw.startswith(b"data:") and not raw.startswith(b"id:") and not raw.startswith(b"event:"):
        return json.loads(raw)["usage"]["completion_tokens"]
    for line in raw.split(b"\n"):
        if line.startswith(b"data: {") and b'"usage"' in line:
            usage = json.loads(line[6:]).get("usage")
            if usage:
                return usage["completion_tokens"]
    return 0


async def open_loop(target: Target, requests: list[Request], qps: float, duration_s: float, seed: int) -> list[Sample]:
    """Poisson arrivals at `qps` for `duration_s`; each request is sent on time whatever the others are doing."""
    rng = random.Random(seed)
    arrivals, at = [], rng.expovariate(qps)
    while at < duration_s:
        arrivals.append(at)
        at += rng.expovariate(qps)
    offset = rng.randrange(len(requests))
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for i, at in enumerate(arrivals):
        delay = start + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        lag = loop.time() - (start + at)
        tasks.append(asyncio.create_task(target.send(requests[(offset + i) % len(requests)], lag)))
    return await asyncio.gather(*tasks)


async def closed_loop(
    target: Target, requests: list[Request], concurrency: int, duration_s: float, warmup_s: float, seed: int
) -> tuple[list[Sample], int, float]:
    """C clients, each sending its next request as soon as the last one is answered; counts completions after the
    warm-up. Requests still running at the end are waited for (not counted) so the next slice starts idle."""
    offset = random.Random(seed).randrange(len(requests))
    start = time.perf_counter()
    deadline = start + duration_s
    samples: list[Sample] = []

    async def client(index: int) -> None:
        n = 0
        while time.perf_counter() < deadline:
            samples.append(await target.send(requests[(offset + index * 997 + n) % len(requests)]))
            n += 1

    await asyncio.gather(*(client(i) for i in range(concurrency)))
    window_start = start + warmup_s
    counted = [s for s in samples if s.status == 200 and window_start <= s.ended_at <= deadline]
    return samples, len(counted), duration_s - warmup_s


async def scrape(session: aiohttp.ClientSession, gateway_url: str) -> dict[str, float]:
    """The gateway's own counters this benchmark decomposes the added latency with."""
    started = time.perf_counter()
    try:
        async with session.get(f"{gateway_url}/metrics", timeout=aiohttp.ClientTimeout(total=30)) as response:
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        print(f"\n  (the gateway's /metrics failed after {time.perf_counter() - started:.1f}s: {exc!r})", flush=True)
        return {}
    wanted = {
        "engine_node_admission_queue_wait_seconds_sum",
        "engine_node_admission_queue_wait_seconds_count",
        "engine_node_admission_batch_size_sum",
        "engine_node_admission_batch_size_count",
        "engine_node_policy_decision_seconds_sum",
        "engine_node_policy_decision_seconds_count",
        "engine_node_continuation_rounds_total",
    }
    values: dict[str, float] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                values[sample.name] += sample.value
    return values


@dataclass
class Level:
    """One load level's results: direct and gateway sides plus the gateway's counters over its slices."""

    direct: Side = field(default_factory=Side)
    gateway: Side = field(default_factory=Side)
    counters: Counter = field(default_factory=Counter)
    # The agent process's CPU seconds and wall seconds over the gateway slices and over the direct ones.
    cpu: Counter = field(default_factory=Counter)

    def cpu_ms_per_request(self) -> tuple[float, float, float]:
        """(raw, net of the agent's CPU rate during the direct slices, that idle rate in ms per second)."""
        n = len(self.gateway.samples)
        if not n or not self.cpu["gateway_wall_s"]:
            return math.nan, math.nan, math.nan
        idle_rate = self.cpu["direct_cpu_s"] / self.cpu["direct_wall_s"] if self.cpu["direct_wall_s"] else 0.0
        raw = 1000 * self.cpu["gateway_cpu_s"] / n
        net = 1000 * (self.cpu["gateway_cpu_s"] - idle_rate * self.cpu["gateway_wall_s"]) / n
        return raw, net, 1000 * idle_rate


async def run_level(agent: AgentUnderTest, requests, *, kind: str, load: float, args, seed: int) -> Level:
    """`kind` "open" (JSON) or "open-sse" (streams): Poisson arrivals at `load` QPS; "closed": `load` clients back
    to back."""
    direct = Target("direct", agent.engine_url, via_gateway=False)
    gateway = Target("gateway", agent.gateway_url, via_gateway=True)
    level = Level()
    for target in (direct, gateway):
        await target.open()
    try:
        # Warm both: connections open, first-request paths (imports, JIT-free but lazy) done.
        for target in (direct, gateway):
            await asyncio.gather(*(target.send(requests[i]) for i in range(8)))
        slice_s = args.duration / args.rounds
        for round_ in range(args.rounds):
            order = (direct, gateway) if round_ % 2 == 0 else (gateway, direct)
            for target in order:
                side = level.direct if target is direct else level.gateway
                before = await scrape(gateway.session, agent.gateway_url) if target is gateway else None
                name = "gateway" if target is gateway else "direct"
                cpu_before, wall_before = process_cpu_s(agent.process.pid), time.perf_counter()
                if kind.startswith("open"):
                    side.samples += await open_loop(target, requests, load, slice_s, seed + round_)
                else:
                    samples, counted, window = await closed_loop(
                        target, requests, int(load), slice_s, min(1.0, slice_s / 4), seed + round_
                    )
                    side.samples += samples
                    side.completed_in_window += counted
                    side.window_s += window
                level.cpu[f"{name}_cpu_s"] += process_cpu_s(agent.process.pid) - cpu_before
                level.cpu[f"{name}_wall_s"] += time.perf_counter() - wall_before
                if before is not None:
                    after = await scrape(gateway.session, agent.gateway_url)
                    if before and after:
                        level.counters.update({key: after[key] - before.get(key, 0.0) for key in after})
                    else:
                        level.counters["scrape_failures"] += 1
                await asyncio.sleep(0.3)
    finally:
        for target in (direct, gateway):
            await target.close()
    return level


def run_http(args, work: Path) -> tuple[dict, dict]:
    """Start each agent in turn, measure its gateway against its own simulator, stop it.

    Returns ({(variant, kind, load): Level}, {variant: the gateway's in-flight cap}).
    """
    variants = [("defaults", {})]
    if not args.skip_no_batch_wait:
        variants.append(("batch.min_size=1", {"min_size": 1}))
    results: dict = {}
    caps: dict = {}
    taken: set[int] = set()
    for index, (label, batch) in enumerate(variants):
        gateway_port = pick_port(args.gateway_port + index if args.gateway_port else 0, "--gateway-port", taken)
        taken.add(gateway_port)
        engine_port = pick_port(args.engine_port + index if args.engine_port else 0, "--engine-port", taken)
        taken.add(engine_port)
        agent = AgentUnderTest(
            name=f"bench-gw-{index}", work=work, gateway_port=gateway_port, engine_port=engine_port,
            batch=batch, seed=args.seed,
        )  # fmt: skip
        cap = caps[label] = IN_FLIGHT_PER_MAX_BATCH * agent.content["batch"]["max_size"]
        levels = [("open", args.qps)] + ([("open-sse", args.qps)] if index == 0 else [])
        if index == 0:
            # At saturation with more clients than the gateway lets through, and with exactly as many.
            levels += [("closed", args.concurrency)] + ([("closed", cap)] if cap < args.concurrency else [])
        try:
            started = time.perf_counter()
            agent.start()
            print(
                f"  [{label}] agent on :{gateway_port} (pid {agent.process.pid}), its simulator on :{engine_port} "
                f"(pid {agent.engine_pid}), online in {time.perf_counter() - started:.1f}s",
                flush=True,
            )
            policy = Policy(agent.content, agent.bundle, IntentClassifier.load())
            requests = build_requests(policy, 2000, args.seed)
            streams = build_requests(policy, 2000, args.seed, stream=True)
            for kind, load in levels:
                what = {"open": f"{load:g} QPS open loop", "open-sse": f"{load:g} QPS open loop, SSE"}.get(
                    kind, f"saturation, {load:g} clients"
                )
                slices = f"{args.rounds} x {args.duration / args.rounds:.1f}s per target"
                print(f"  [{label}] {what}: {slices}", end="", flush=True)
                began = time.perf_counter()
                results[(label, kind, load)] = asyncio.run(
                    run_level(
                        agent,
                        streams if kind == "open-sse" else requests,
                        kind=kind,
                        load=load,
                        args=args,
                        seed=args.seed,
                    )
                )
                print(f" ({time.perf_counter() - began:.0f}s)", flush=True)
        finally:
            agent.stop()
    return results, caps
