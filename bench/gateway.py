"""What the engine-node gateway's request policy costs, each figure against a baseline measured in the same run.

1. HTTP, gateway vs direct: one stand-alone agent (`python -m engine_node --backend simulator`, no control plane, the
   template defaults and a policy bundle written to its state dir) runs its simulator child on an engine port this
   script picks (`--engine-port`), so the direct baseline calls *the same simulator process* the gateway forwards to.
   Non-streaming chat requests, a zh/en shop-message mix from engine_node/policy/data/intents.jsonl:
   - 50 QPS open loop (Poisson arrivals, the same schedule and messages for both targets): p50/p99 end-to-end
     latency direct and through the gateway, the gateway's added latency and the ratio;
   - saturation, closed loop with C clients (64), and with as many as the gateway lets through to the engine
     (4 x batch.max_size = 32): throughput direct vs through the gateway, and latency.
   Direct and gateway slices alternate (D G, G D, ...) so drift and noisy neighbours hit both alike.
   Like for like: the direct request body is what the gateway forwards (its tier temperature and max_tokens, worked
   out by the same Policy in-process and checked against the gateway's X-Policy-* headers), and replies (8-160
   tokens) stay under the 256-token first-turn cap, so the gateway never adds continuation rounds (counted anyway).
   With the template's defaults the batcher holds a lone request up to batch.timeout_ms for a partner while others
   are in flight, by design; a second agent with batch.min_size=1 shows the gateway without that wait.
2. Policy decision time per message, in-process, over every message of intents.jsonl: Policy.decide (classification
   and rules), the classifier alone and the rules alone (a Policy without classifier: strict regexes, precedence,
   max_tokens); per message the best of the passes, so other processes' noise stays out. Baseline: json.loads of
   the chat request body carrying the same message, work every request costs the gateway before any policy runs.
3. Classifier accuracy on the held-out split the shipped model was judged by (whole templates held out), with
   per-label recall; baseline: always answering the training split's most common label.

Run from the repository root: `.venv/bin/python bench/gateway.py [--duration S] [--parts http,policy,accuracy]`.
Every process it starts is killed on exit, Ctrl-C or error (the agent and its simulator run in their own sessions).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from controlplane.params import schema  # noqa: E402
from engine_node import openai_api  # noqa: E402
from engine_node.admission import IN_FLIGHT_PER_MAX_BATCH  # noqa: E402
from engine_node.config import content_hash  # noqa: E402
from engine_node.gateway import apply_decision  # noqa: E402
from engine_node.policy.dataset import dataset_sha256, load_examples, split_by_template  # noqa: E402
from engine_node.policy.intent import IntentClassifier  # noqa: E402
from engine_node.policy.rules import Policy  # noqa: E402
from engine_node.policy.train_intent import evaluate  # noqa: E402

MODEL = "simulated-chat-model"
SYSTEM_PROMPT = "你是某电商平台的客服助手，请简洁、准确地回答顾客的问题。"
# ~100 ms replies: 8-160 tokens (median 40) at ~2.6 ms per decode step with a few sequences running.
PROFILE = """\
latency:
  time_scale: 0.1
reply_length:
  median: 40
  sigma: 0.5
  min: 8
  max: 160
"""
REPLY_MAX_TOKENS = 160
BUNDLE = {
    "pool": "bench",
    "whitelists": {"legal": ["legal_policy"]},
    "overrides": [],
    "degradation": {"active": False, "reason": "", "since": None},
    "intent_model": None,
}
REQUEST_TIMEOUT_S = 60
START_TIMEOUT_S = 60


# --- processes ----------------------------------------------------------------------------------------------------


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(requested: int, what: str, taken: set[int]) -> int:
    if requested:
        if not port_free(requested) or requested in taken:
            raise SystemExit(f"bench/gateway.py: port {requested} ({what}) is in use; pass another, or 0 for any")
        return requested
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in taken:
            return port


def child_pids(pid: int) -> list[int]:
    """Direct children of pid, from /proc (the agent starts its engine in a session of its own)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ")".
        fields_ = stat[stat.rindex(")") + 2 :].split()
        if int(fields_[1]) == pid:
            children.append(int(entry.name))
    return children


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class AgentUnderTest:
    """One `python -m engine_node` on the simulator, in its own session, with a config on its disk."""

    def __init__(self, *, name: str, work: Path, gateway_port: int, engine_port: int, batch: dict, seed: int):
        self.name = name
        self.state_dir = work / name
        self.gateway_port = gateway_port
        self.engine_port = engine_port
        self.gateway_url = f"http://127.0.0.1:{gateway_port}"
        self.engine_url = f"http://127.0.0.1:{engine_port}"
        self.log_path = self.state_dir / "agent.log"
        self.content = schema.defaults()
        self.content["batch"].update(batch)
        self.bundle = BUNDLE
        self.process: subprocess.Popen | None = None
        self.engine_pid: int | None = None
        self.pids: set[int] = set()
        profile = work / "profile.yaml"
        profile.write_text(PROFILE, encoding="utf-8")
        self.args = [
            sys.executable, "-m", "engine_node",
            "--backend", "simulator", "--simulator-profile", str(profile),
            "--node-name", name, "--port", str(gateway_port), "--engine-port", str(engine_port),
            "--state-dir", str(self.state_dir), "--queue-timeout", "30", "--drain-timeout", "5",
            # No liveness probes during the measurement: each is a request the engine would serve.
            "--probe-interval", "3600",
            f"--engine-arg=--seed={seed}",
        ]  # fmt: skip

    def write_state(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        digest = content_hash(self.content)
        message = {
            "version": {"template": "bench", "number": 1, "hash": digest},
            "hash": digest,
            "content": self.content,
        }
        (self.state_dir / "last_good_config.json").write_text(json.dumps(message), encoding="utf-8")
        bundle = {"hash": content_hash(self.bundle), "content": self.bundle}
        (self.state_dir / "policy_bundle.json").write_text(json.dumps(bundle), encoding="utf-8")

    def start(self) -> None:
        self.write_state()
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps it for its life
        try:
            # The agent reads ENGINE_NODE_* defaults and the simulator SIMULATOR_FAULTS from the environment: none
            # of the caller's may change what is measured.
            env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGINE_NODE_", "SIMULATOR_"))}
            self.process = subprocess.Popen(
                self.args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            log.close()
        self.pids.add(self.process.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self.pids.update(child_pids(self.process.pid))
            if self.process.poll() is not None:
                raise RuntimeError(f"agent {self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            health = http_json(f"{self.gateway_url}/healthz")
            if health and health.get("status") == "online":
                self.engine_pid = health.get("engine_pid")
                if self.engine_pid:
                    self.pids.add(self.engine_pid)
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"agent {self.name} not online after {START_TIMEOUT_S}s:\n{self.log_tail()}")
        version = http_json(f"{self.engine_url}/version") or {}
        if not version.get("simulated"):
            raise RuntimeError(f"{self.engine_url} is not the agent's simulator (/version says {version})")

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM the agent's process group (it stops its engine), SIGKILL whatever is left of either."""
        if self.process is None:
            return
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
        try:
            self._stop()
        finally:
            signal.signal(signal.SIGINT, previous)

    def _stop(self) -> None:
        self.pids.update(child_pids(self.process.pid))
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        for pid in self.pids - {self.process.pid}:
            deadline = time.monotonic() + 5
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if alive(pid) and is_ours(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        self.process = None


def is_ours(pid: int) -> bool:
    """The pid still runs something this script started (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"engine_node" in cmdline


def http_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with contextlib.suppress(ValueError):
            return json.loads(exc.read())
    except (OSError, ValueError):
        pass
    return None


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


def build_requests(policy: Policy, count: int, seed: int) -> list[Request]:
    """A seeded sample of dataset messages; the direct body gets the gateway's temperature and max_tokens."""
    examples = load_examples()
    rng = random.Random(seed)
    picked = rng.sample(examples, min(count, len(examples)))
    requests = []
    for example in picked:
        client = {
            "model": MODEL,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": example.text}],
            "temperature": 1.0,
        }
        raw = openai_api.compact_json(client).encode("utf-8")
        chat = openai_api.parse_chat(raw, {})
        decision = policy.decide(
            chat.latest_user_text,
            prompt_tokens=chat.prompt_tokens,
            client_max_tokens=chat.client_max_tokens,
            business_tag=chat.business_tag,
            conversation=chat.conversation,
        )
        forwarded = apply_decision(chat.body, decision)
        requests.append(
            Request(raw, openai_api.compact_json(forwarded).encode("utf-8"), decision.temperature, decision.max_tokens)
        )
    return requests


class Target:
    def __init__(self, name: str, base_url: str, via_gateway: bool):
        self.name = name
        self.url = f"{base_url}/v1/chat/completions"
        self.via_gateway = via_gateway
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
            async with self.session.post(self.url, data=body, headers={"Content-Type": "application/json"}) as r:
                raw = await r.read()
                ended = time.perf_counter()
                status, headers = r.status, r.headers
        except (aiohttp.ClientError, TimeoutError):
            ended = time.perf_counter()
            return Sample(ended - started, 599, lag_s=lag_s, ended_at=ended)
        sample = Sample(ended - started, status, lag_s=lag_s, ended_at=ended)
        if status == 200:
            sample.completion_tokens = json.loads(raw)["usage"]["completion_tokens"]
            if self.via_gateway:
                sample.continuation_rounds = int(headers.get("X-Continuation-Rounds", 0))
                expected = (f"{request.temperature:g}", str(request.max_tokens))
                sample.policy_mismatch = (headers.get("X-Policy-Temperature"), headers.get("X-Policy-Max-Tokens")) != (
                    expected
                )
        return sample


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


async def run_level(agent: AgentUnderTest, requests, *, kind: str, load: float, args, seed: int) -> Level:
    """`kind` "open": Poisson arrivals at `load` QPS; "closed": `load` clients back to back."""
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
                if kind == "open":
                    side.samples += await open_loop(target, requests, load, slice_s, seed + round_)
                else:
                    samples, counted, window = await closed_loop(
                        target, requests, int(load), slice_s, min(1.0, slice_s / 4), seed + round_
                    )
                    side.samples += samples
                    side.completed_in_window += counted
                    side.window_s += window
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
        levels = [("open", args.qps)]
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
            for kind, load in levels:
                what = f"{load:g} QPS open loop" if kind == "open" else f"saturation, {load:g} clients"
                slices = f"{args.rounds} x {args.duration / args.rounds:.1f}s per target"
                print(f"  [{label}] {what}: {slices}", end="", flush=True)
                began = time.perf_counter()
                results[(label, kind, load)] = asyncio.run(
                    run_level(agent, requests, kind=kind, load=load, args=args, seed=args.seed)
                )
                print(f" ({time.perf_counter() - began:.0f}s)", flush=True)
        finally:
            agent.stop()
    return results, caps


# --- policy decision time -----------------------------------------------------------------------------------------


def run_policy(passes: int) -> dict:
    content = schema.defaults()
    classifier = IntentClassifier.load()
    policy = Policy(content, BUNDLE, classifier)
    rules_only = Policy(content, BUNDLE, None)
    texts = [example.text for example in load_examples()]
    bodies = [
        openai_api.compact_json(
            {
                "model": MODEL,
                "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}],
                "temperature": 1.0,
            }
        ).encode("utf-8")
        for text in texts
    ]
    prompt_tokens = [openai_api.estimate_tokens(SYSTEM_PROMPT + text) + 8 for text in texts]
    keys = ("decide", "classify", "rules", "json")
    # Per message and row, the best of the passes: what the work costs, without the preemptions and cache misses other
    # processes on this shared machine cause (bench/run.py's convention, per message instead of per loop).
    best = {key: [float("inf")] * len(texts) for key in keys}
    clock = time.perf_counter_ns
    rng = random.Random(5)
    order = list(range(len(texts)))
    work = {
        "json": lambda i: json.loads(bodies[i]),
        "classify": lambda i: policy.classify(texts[i]),
        "rules": lambda i: rules_only.decide(texts[i], prompt_tokens=prompt_tokens[i]),
        "decide": lambda i: policy.decide(texts[i], prompt_tokens=prompt_tokens[i]),
    }
    for _ in range(passes):
        # One sweep per row over the messages in a fresh order: every call follows a call of the same code on another
        # message, as in the gateway, where one request's buckets are not in the CPU cache for the next one.
        for key in keys:
            rng.shuffle(order)
            run, row = work[key], best[key]
            for i in order:
                t0 = clock()
                run(i)
                elapsed = clock() - t0
                if elapsed < row[i]:
                    row[i] = elapsed
    timings = {key: [ns / 1000 for ns in values] for key, values in best.items()}
    # What perf_counter_ns itself adds to every row, for the reader to subtract if it matters.
    empty = []
    for _ in range(20000):
        t0 = clock()
        empty.append(clock() - t0)
    return {"timings": timings, "n": len(texts), "passes": passes, "timer_us": statistics.median(empty) / 1000}


# --- classifier accuracy ------------------------------------------------------------------------------------------


def run_accuracy(floor: float) -> dict:
    classifier = IntentClassifier.load()
    examples = load_examples()
    train_set, held_out = split_by_template(examples)
    result = evaluate(classifier, held_out)
    majority_label, _ = Counter(example.label for example in train_set).most_common(1)[0]
    majority = sum(example.label == majority_label for example in held_out) / len(held_out)
    confident = correct = 0
    for example in held_out:
        intent = classifier.classify(example.text)
        if intent.confidence >= floor:
            confident += 1
            correct += intent.label == example.label
    recall_support = Counter(example.label for example in held_out)
    return {
        "result": result,
        "majority_label": majority_label,
        "majority": majority,
        "n_train": len(train_set),
        "coverage": confident / len(held_out),
        "accuracy_confident": correct / confident if confident else float("nan"),
        "floor": floor,
        "support": recall_support,
        "model_split": classifier.meta.get("split"),
        "model_data_matches": classifier.meta.get("training_set_sha256") == dataset_sha256(),
        "model_n_train": classifier.meta.get("n_train"),
    }


# --- report -------------------------------------------------------------------------------------------------------


def report(http: tuple[dict, dict] | None, policy: dict | None, accuracy: dict | None, args) -> None:
    cores = os.cpu_count()
    print()
    print(f"== engine-node gateway benchmark ({cores} CPU cores, shared by the load generator, the gateway and the")
    print("   simulator; other processes on the machine add noise: compare ratios, not absolute figures)")
    if http:
        print_http(http, args)
    if policy:
        print_policy(policy)
    if accuracy:
        print_accuracy(accuracy)


def print_http(http: tuple[dict, dict], args) -> None:
    levels, caps = http
    print()
    print("HTTP, non-streaming chat completions; direct = the agent's own simulator child on its engine port (the")
    print(f"process the gateway forwards to); {args.rounds} alternating slices per target and load level")
    print(f"{'':44} {'direct':>10} {'gateway':>10} {'added':>10} {'ratio':>7}")
    notes = []
    for (label, kind, load), level in levels.items():
        d, g = level.direct, level.gateway
        if kind == "open":
            latency_rows(f"{load:g} QPS, {label}:", d, g)
            c = level.counters
            waits = c["engine_node_admission_queue_wait_seconds_count"]
            batches = c["engine_node_admission_batch_size_count"]
            decisions = c["engine_node_policy_decision_seconds_count"]
            if c["scrape_failures"] or not waits:
                inside = f"gateway's counters unavailable ({c['scrape_failures']:.0f} /metrics scrapes failed)"
            else:
                inside = (
                    f"gateway admission wait mean "
                    f"{1000 * c['engine_node_admission_queue_wait_seconds_sum'] / waits:.1f} ms, "
                    f"batch size mean {c['engine_node_admission_batch_size_sum'] / batches:.2f}, "
                    f"policy decision mean {1e6 * c['engine_node_policy_decision_seconds_sum'] / decisions:.0f} us "
                    f"(the gateway's own histograms)"
                )
            notes.append(
                f"{load:g} QPS, {label}: {len(g.ok)}/{len(g.samples)} gateway and {len(d.ok)}/{len(d.samples)} "
                f"direct answered 200; {inside}; load generator late by p99 "
                f"{1000 * percentile([s.lag_s for s in d.samples + g.samples], 0.99):.1f} ms"
            )
        else:
            head = f"{load:g} clients, {label}:"
            dt, gt = d.throughput, g.throughput
            print(f"{head + ' req/s':<44} {dt:>10.1f} {gt:>10.1f} {gt - dt:>+10.1f} {gt / dt if dt else 0:>6.2f}x")
            latency_rows(head, d, g)
            if load > caps[label]:
                notes.append(
                    f"{load:g} clients: the gateway releases at most {caps[label]} requests to the engine at once "
                    f"(4 x batch.max_size) and queues the rest; direct, all {load:g} share the engine's batch "
                    f"(max_num_seqs {schema.defaults()['engine']['max_num_seqs']})"
                )
    samples = list(levels.values())
    via_gateway = [s for level in samples for s in level.gateway.ok]
    tokens_d = [s.completion_tokens for level in samples for s in level.direct.ok]
    tokens_g = [s.completion_tokens for s in via_gateway]
    rounds = sum(s.continuation_rounds for s in via_gateway)
    mismatches = sum(s.policy_mismatch for s in via_gateway)
    errors = Counter()
    for level in samples:
        errors.update({f"direct {k}": v for k, v in level.direct.errors.items()})
        errors.update({f"gateway {k}": v for k, v in level.gateway.errors.items()})
    print(
        f"like for like: direct bodies carry the gateway's temperature and max_tokens (differing from its X-Policy-* "
        f"headers: {mismatches} of {len(via_gateway)}); replies {statistics.fmean(tokens_d):.1f} tokens direct, "
        f"{statistics.fmean(tokens_g):.1f} via the gateway, all under its 256-token cap (longest {REPLY_MAX_TOKENS}); "
        f"continuation rounds added by the gateway: {rounds}; errors: {dict(errors) or 'none'}"
    )
    for note in notes:
        print(f"- {note}")


def latency_rows(head: str, direct: Side, gateway: Side) -> None:
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        dv, gv = direct.latency_ms(q), gateway.latency_ms(q)
        print(f"{head + ' latency ' + name:<44} {dv:>7.1f} ms {gv:>7.1f} ms {gv - dv:>+7.1f} ms {gv / dv:>6.2f}x")


def print_policy(policy: dict) -> None:
    t = policy["timings"]
    base = statistics.fmean(t["json"])
    print()
    print(
        f"policy decision per message, in-process, {policy['n']} messages, each the best of {policy['passes']} passes "
        f"(timer overhead {policy['timer_us'] * 1000:.0f} ns included in every row)"
    )
    print(f"{'':44} {'p50':>9} {'p99':>9} {'mean':>9} {'mean / baseline':>16}")
    rows = [
        ("Policy.decide (classification + rules)", "decide"),
        ("  classification (IntentClassifier)", "classify"),
        ("  rules (regexes, precedence, max_tokens)", "rules"),
        ("baseline: json.loads of the request body", "json"),
    ]
    for name, key in rows:
        values = t[key]
        mean = statistics.fmean(values)
        print(
            f"{name:<44} {percentile(values, 0.5):>6.1f} us {percentile(values, 0.99):>6.1f} us "
            f"{mean:>6.1f} us {mean / base:>15.1f}x"
        )


def print_accuracy(acc: dict) -> None:
    result = acc["result"]
    print()
    print(
        f"intent classifier (shipped model, trained on the '{acc['model_split']}' split, "
        f"n_train {acc['model_n_train']}) on the held-out templates: n={result['n']}"
    )
    if not acc["model_data_matches"] or acc["model_split"] != "template":
        print("  WARNING: the shipped model was not trained on this dataset's by-template split: not held-out figures")
    ratio = result["accuracy"] / acc["majority"]
    print(f"{'accuracy':<44} {result['accuracy']:>9.4f}")
    print(
        f"{'baseline: majority class (' + acc['majority_label'] + ')':<44} {acc['majority']:>9.4f}   ratio {ratio:.1f}x"
    )
    print(
        f"{'at the confidence floor ' + format(acc['floor'], 'g') + ': coverage':<44} {acc['coverage']:>9.4f}   "
        f"accuracy of those {acc['accuracy_confident']:.4f}"
    )
    print("per-label recall (held-out support):")
    for label, scores in result["per_label"].items():
        print(f"  {label:<26} {scores['recall']:.3f}  ({acc['support'][label]})")


def interrupted(signum, frame) -> None:
    """SIGTERM ends the run as Ctrl-C does: through the finally blocks that stop every agent."""
    raise KeyboardInterrupt


# --- main ---------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=12, help="seconds per target and load level (default 12)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating slices the duration is cut into")
    parser.add_argument("--qps", type=float, default=50, help="open-loop arrival rate (default 50)")
    parser.add_argument("--concurrency", type=int, default=64, help="closed-loop clients at saturation (default 64)")
    parser.add_argument("--passes", type=int, default=3, help="passes over the dataset for the policy timing")
    parser.add_argument("--seed", type=int, default=7, help="seed of the message sample, arrivals and the simulator")
    parser.add_argument("--gateway-port", type=int, default=0, help="first gateway port (0: free ports)")
    parser.add_argument("--engine-port", type=int, default=0, help="first simulator port (0: free ports)")
    parser.add_argument("--skip-no-batch-wait", action="store_true", help="skip the second agent with batch.min_size=1")
    parser.add_argument("--parts", default="http,policy,accuracy", help="any of http,policy,accuracy")
    parser.add_argument("--keep", action="store_true", help="keep the agents' state dirs and logs")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if unknown := parts - {"http", "policy", "accuracy"}:
        parser.error(f"--parts: unknown {sorted(unknown)}")
    if args.duration <= 0 or args.rounds < 1 or args.qps <= 0 or args.concurrency < 1:
        parser.error("--duration, --qps must be positive; --rounds, --concurrency at least 1")

    signal.signal(signal.SIGTERM, interrupted)
    started = time.perf_counter()
    accuracy = policy = http = None
    if "accuracy" in parts:
        print("classifier accuracy on the held-out split ...", flush=True)
        accuracy = run_accuracy(schema.defaults()["intent"]["confidence_floor"])
    if "policy" in parts:
        print(f"policy decision time, {args.passes} passes over the dataset ...", flush=True)
        gc.collect()
        policy = run_policy(args.passes)
    if "http" in parts:
        print("gateway vs direct over HTTP ...", flush=True)
        work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
        try:
            http = run_http(args, work)
        except RuntimeError as exc:
            raise SystemExit(f"bench/gateway.py: {exc}") from None
        finally:
            if args.keep:
                print(f"  logs kept in {work}")
            else:
                shutil.rmtree(work, ignore_errors=True)
    report(http, policy, accuracy, args)
    print(f"\n(whole benchmark: {time.perf_counter() - started:.0f}s)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("\nbench/gateway.py: interrupted; the processes it started are stopped", file=sys.stderr)
        sys.exit(130)
