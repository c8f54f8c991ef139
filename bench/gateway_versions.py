"""The gateway before and after, in one run: this tree's agent against the agent of another revision (`--baseline`,
exported with `git archive` into the bench's work directory), both on the simulator, both with batch.min_size=1 so
that admission holds nothing and the figures are the gateway's own work. Part of bench/gateway.py (run that).

Per version, slices alternate A B, B A, ... so drift and the machine's other work hit both alike:
- JSON at `--qps` open loop: p50 / p99 added to the direct call of the same simulator (the agent's own child);
- closed loop, `--versions-clients` clients, JSON and SSE: the agent's CPU per gateway request, net of its CPU rate
  while the direct slices ran (the marginal cost of a request);
- idle: the agent's CPU share with no traffic at all (its telemetry scrape, samples, probes), both agents at once;
- `/healthz` while clients holding a valid key send maximum-size bodies (8 MiB of tiny messages, or of tiny content
  parts) back to back: the worst and p99 health-check latency, checked every 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from gateway_agent import CLIENT_KEY, MODEL, AgentUnderTest, pick_port, process_cpu_s  # noqa: E402
from gateway_load import Level, build_requests, percentile, run_level  # noqa: E402

from engine_node.policy.intent import IntentClassifier  # noqa: E402
from engine_node.policy.rules import Policy  # noqa: E402

MAX_BODY_BYTES = 8 * 1024 * 1024
VERSIONS = ("before", "after")


def export_revision(revision: str, work: Path) -> Path:
    """The tree of `revision` (its engine_node and the contract it imports), unpacked under `work`."""
    target = work / f"tree-{revision}"
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "engine_node", "controlplane/params"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    (target / "controlplane" / "__init__.py").touch()
    return target


def hostile_bodies() -> list[bytes]:
    """Maximum-size chat bodies a client with a valid key may send: many tiny messages, many tiny content parts."""
    head = f'{{"model":"{MODEL}","messages":['.encode()
    message = b'{"role":"user","content":"x"},'
    many = head + message * ((MAX_BODY_BYTES - len(head) - 64) // len(message)) + b'{"role":"user","content":"x"}]}'
    part = b'{"type":"text","text":"x"},'
    start = head + b'{"role":"user","content":['
    parts = start + part * ((MAX_BODY_BYTES - len(start) - 64) // len(part)) + b'{"type":"text","text":"x"}]}]}'
    return [many, parts]


async def healthz_under_bodies(agent: AgentUnderTest, duration_s: float, senders: int) -> dict:
    """`senders` clients post maximum-size bodies back to back while /healthz is asked every 20 ms."""
    bodies = hostile_bodies()
    headers = {"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"}
    latencies: list[float] = []
    answers: dict[int, int] = {}
    deadline = time.perf_counter() + duration_s
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:

        async def sender(index: int) -> None:
            n = index
            while time.perf_counter() < deadline:
                try:
                    async with session.post(
                        f"{agent.gateway_url}/v1/chat/completions", data=bodies[n % 2], headers=headers
                    ) as r:
                        await r.read()
                        answers[r.status] = answers.get(r.status, 0) + 1
                except (aiohttp.ClientError, TimeoutError):
                    answers[599] = answers.get(599, 0) + 1
                n += 1

        async def prober() -> None:
            await asyncio.sleep(0.5)  # the bodies are on their way
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                async with session.get(f"{agent.gateway_url}/healthz") as r:
                    await r.read()
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(0.02)

        await asyncio.gather(prober(), *(sender(i) for i in range(senders)))
    return {"latencies": latencies, "answers": answers}


def idle_share(agents: dict[str, AgentUnderTest], seconds: float) -> dict[str, float]:
    """Each agent's CPU seconds per second over `seconds` with no request at all."""
    before = {name: process_cpu_s(agent.process.pid) for name, agent in agents.items()}
    time.sleep(seconds)
    return {name: (process_cpu_s(agent.process.pid) - before[name]) / seconds for name, agent in agents.items()}


def run_versions(args, work: Path) -> dict:
    """Start both agents, measure them slice by slice in alternating order, stop them."""
    roots = {"before": export_revision(args.baseline, work), "after": ROOT}
    taken: set[int] = set()
    agents = {}
    for version in VERSIONS:
        gateway_port = pick_port(0, "--gateway-port", taken)
        taken.add(gateway_port)
        engine_port = pick_port(0, "--engine-port", taken)
        taken.add(engine_port)
        agents[version] = AgentUnderTest(
            name=f"bench-gw-{version}", work=work, gateway_port=gateway_port, engine_port=engine_port,
            batch={"min_size": 1}, seed=args.seed, root=roots[version],
        )  # fmt: skip
    results: dict = {"levels": {}, "idle": {}, "healthz": {}, "baseline": args.baseline}
    try:
        for version, agent in agents.items():
            agent.start()
            print(f"  [{version}] agent pid {agent.process.pid} from {agent.root.name}", flush=True)
        policy = Policy(agents["after"].content, agents["after"].bundle, IntentClassifier.load())
        requests = build_requests(policy, 2000, args.seed)
        streams = build_requests(policy, 2000, args.seed, stream=True)
        time.sleep(3)  # past the start-up's own work (engine scrapes begin, imports settle)
        print(f"  idle CPU, {args.idle_s:g}s", flush=True)
        results["idle"] = idle_share(agents, args.idle_s)
        one_slice = argparse.Namespace(duration=args.versions_slice * 2, rounds=2)
        kinds = [
            ("open", args.qps, requests),
            ("closed", args.versions_clients, requests),
            ("closed-sse", args.versions_clients, streams),
        ]
        for round_ in range(args.versions_rounds):
            order = VERSIONS if round_ % 2 == 0 else VERSIONS[::-1]
            for kind, load, bodies in kinds:
                for version in order:
                    print(f"  round {round_ + 1} {kind} {load:g} [{version}]", flush=True)
                    level = asyncio.run(
                        run_level(
                            agents[version], bodies, kind="closed" if kind == "closed-sse" else kind, load=load,
                            args=one_slice, seed=args.seed + round_,
                        )
                    )  # fmt: skip
                    merge(results["levels"].setdefault((kind, version), Level()), level)
        for round_ in range(args.versions_rounds):
            for version in VERSIONS if round_ % 2 == 0 else VERSIONS[::-1]:
                print(f"  /healthz under maximum-size bodies [{version}]", flush=True)
                got = asyncio.run(healthz_under_bodies(agents[version], args.versions_slice, args.hostile_clients))
                into = results["healthz"].setdefault(version, {"latencies": [], "answers": {}})
                into["latencies"] += got["latencies"]
                for status, count in got["answers"].items():
                    into["answers"][status] = into["answers"].get(status, 0) + count
    finally:
        for agent in agents.values():
            agent.stop()
    return results


def merge(into: Level, level: Level) -> None:
    into.direct.samples += level.direct.samples
    into.gateway.samples += level.gateway.samples
    into.cpu.update(level.cpu)
    into.counters.update(level.counters)


def print_versions(results: dict, args) -> None:
    levels = results["levels"]
    print()
    print(
        f"before ({results['baseline']}) and after (this tree), batch.min_size=1, {args.versions_rounds} alternating "
        f"rounds of {args.versions_slice:g}s slices per target"
    )
    print(f"{'':52} {'before':>10} {'after':>10} {'after/before':>13}")

    def row(name: str, before: float, after: float, unit: str) -> None:
        ratio = after / before if before else float("nan")
        print(f"{name:<52} {before:>7.2f} {unit:<2} {after:>7.2f} {unit:<2} {ratio:>12.2f}x")

    for kind, label in (("closed", "JSON"), ("closed-sse", "SSE")):
        net = [levels[(kind, v)].cpu_ms_per_request()[1] for v in VERSIONS]
        row(f"{label}: agent CPU per request, closed loop (net)", *net, "ms")
        rate = [len(levels[(kind, v)].gateway.ok) / max(1, len(levels[(kind, v)].gateway.samples)) for v in VERSIONS]
        if min(rate) < 1:
            print(f"  ({label}: answered 200: {rate[0]:.1%} before, {rate[1]:.1%} after)")
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        added = []
        for version in VERSIONS:
            level = levels[("open", version)]
            added.append(level.gateway.latency_ms(q) - level.direct.latency_ms(q))
        row(f"JSON {args.qps:g} QPS: latency added to direct, {name}", *added, "ms")
    idle = results["idle"]
    row(f"idle: agent CPU share over {args.idle_s:g}s (% of a core)", 100 * idle["before"], 100 * idle["after"], "%")
    worst = []
    for version in VERSIONS:
        latencies = results["healthz"].get(version, {}).get("latencies") or [float("nan")]
        worst.append(1000 * max(latencies))
    row(f"/healthz worst, {args.hostile_clients} clients sending 8 MiB bodies", *worst, "ms")
    p99 = [1000 * percentile(results["healthz"].get(v, {}).get("latencies") or [], 0.99) for v in VERSIONS]
    row("/healthz p99, same", *p99, "ms")
    for version in VERSIONS:
        got = results["healthz"].get(version, {})
        print(
            f"- {version}: {len(got.get('latencies', []))} health checks; maximum-size bodies answered "
            f"{json.dumps(got.get('answers', {}), sort_keys=True)}"
        )
