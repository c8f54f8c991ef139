"""Publish-to-last-ACK latency with 100 and 500 agent connections (production settings: Postgres, Redis).

N daphne processes serve the control plane (`--processes`, default 1; agents are spread over them round-robin, as a
load balancer spreads WebSockets); lightweight agents (WebSocket clients that ACK every pushed config at once and
heartbeat every 2 s, in this benchmark's own process, sharing the machine's cores with daphne) connect with real node
tokens. Each publish flips the pool between two versions; the time is from the start of `pool_publish` until the
database shows every node on the new version (so it includes the control plane recording each ACK). The baseline is
the same measurement with a single node, taken in the same run. `--nodes 1,100,1000 --processes 2` is the
1,000-agent, two-process figure of docs/deploy.md.
"""

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/controlplane_bench")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
os.environ.update(DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL, DJANGO_SETTINGS_MODULE="controlplane.settings")
# A benchmark database on Postgres: the settings refuse the embedded key there.
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-key-never-used-in-production")
sys.path.insert(0, str(ROOT))

from bench.control_planes import daphnes, load_text  # noqa: E402 - after the path and environment are set


def prepare_database() -> None:
    import psycopg

    name = DATABASE_URL.rsplit("/", 1)[1]
    with psycopg.connect(DATABASE_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()


async def fake_agent(
    url: str, token: str, applied: str, ready: asyncio.Event, stop: asyncio.Event, reconnects: list
) -> None:
    """Connects, says hello with the hash it runs, ACKs every pushed config and heartbeats; like a real agent it
    connects again (after a second) when the connection fails or drops, saying hello with what it last applied."""
    import aiohttp

    headers = {"Authorization": f"Bearer {token}"}
    while not stop.is_set():
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(url, headers=headers, max_msg_size=0) as ws,
            ):
                await ws.receive()
                await ws.send_json({"type": "hello", "backend": "bench", "applied_hash": applied, "status": "online"})
                ready.set()

                async def beat(ws=ws):
                    while not stop.is_set():
                        await asyncio.sleep(2)
                        with contextlib.suppress(ConnectionError, aiohttp.ClientError):
                            await ws.send_json({"type": "heartbeat", "status": "online"})

                beats = asyncio.create_task(beat())
                try:
                    async for message in ws:
                        data = json.loads(message.data)
                        if data.get("type") == "config":
                            await ws.send_json({"type": "ack", "hash": data["hash"], "version": data["version"]})
                            applied = data["hash"]
                        if stop.is_set():
                            return
                finally:
                    beats.cancel()
        except (ConnectionError, aiohttp.ClientError, TimeoutError):
            pass
        if not stop.is_set():
            reconnects[0] += 1
            await asyncio.sleep(1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(nodes: int, publishes: int, ports: list[int], connect_per_s: float) -> list[float]:
    from asgiref.sync import sync_to_async

    from controlplane.accounts.models import User
    from controlplane.nodes.models import EngineNode, Pool
    from controlplane.nodes.services.pools import pool_create, pool_publish
    from controlplane.nodes.tokens import token_generate, token_hash
    from controlplane.params.services.templates import template_create, template_version_create

    def setup():
        actor = User.objects.get_or_create(username="bench", defaults={"role": "sre"})[0]
        pool = pool_create(actor=actor, name=f"bench-{nodes}", is_production=False)
        # One stage covering the pool: every publish goes to every node at once (what this measures), not to a canary.
        Pool.objects.filter(pk=pool.pk).update(canary_stages=[{"percent": 100}])
        template = template_create(actor=actor, name=f"bench-{nodes}")
        doc = {"inference_params": {"max_tokens": {"whitelist": []}}}
        a = template_version_create(actor=actor, template=template, document=doc, base_number=None)
        doc["inference_params"]["batch"] = {"timeout_ms": 40}
        b = template_version_create(actor=actor, template=template, document=doc, base_number=1)
        pool_publish(actor=actor, pool=pool, version=a, reason="bench baseline")
        tokens = [token_generate() for _ in range(nodes)]
        EngineNode.objects.bulk_create(
            EngineNode(name=f"b{nodes}-{i}", pool=pool, token_hash=token_hash(t), token_prefix=t[:12])
            for i, t in enumerate(tokens)
        )
        return actor, pool, a, b, tokens

    actor, pool, a, b, tokens = await sync_to_async(setup)()
    urls = [f"ws://127.0.0.1:{port}/ws/agent/" for port in ports]
    stop = asyncio.Event()
    readies = [asyncio.Event() for _ in tokens]
    agents = []
    reconnects = [0]
    for i, (token, ready) in enumerate(zip(tokens, readies, strict=True)):
        url = urls[i % len(urls)]
        agents.append(asyncio.create_task(fake_agent(url, token, a.content_hash, ready, stop, reconnects)))
        await asyncio.sleep(1 / connect_per_s)  # rather than all at once: each hello is a database write
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
    print(f"  {nodes} agents connected ({reconnects[0]} connection attempts failed and were retried)", flush=True)
    await asyncio.sleep(1)
    before = reconnects[0]

    def publish_and_wait(version) -> float:
        fresh = Pool.objects.get(pk=pool.pk)
        started = time.perf_counter()
        pool_publish(actor=actor, pool=fresh, version=version, reason="bench")
        while EngineNode.objects.filter(pool=pool).exclude(applied_hash=version.content_hash).exists():
            if time.perf_counter() - started > 60:
                missing = EngineNode.objects.filter(pool=pool).exclude(applied_hash=version.content_hash).count()
                raise RuntimeError(f"{missing} of {nodes} nodes did not ACK within 60 s")
            time.sleep(0.005)
        return time.perf_counter() - started

    # One unmeasured publish first: it opens the worker threads' database connections and Redis pool.
    await sync_to_async(publish_and_wait)(b)
    samples = []
    for i in range(publishes):
        samples.append(await sync_to_async(publish_and_wait)(a if i % 2 == 0 else b))
        await asyncio.sleep(0.3)
    print(f"  {nodes} agents: {reconnects[0] - before} reconnects while publishing", flush=True)
    stop.set()
    for task in agents:
        task.cancel()
    await asyncio.gather(*agents, return_exceptions=True)
    return samples


def main() -> None:
    import django

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=1, help="daphne processes the agents are spread over")
    parser.add_argument("--nodes", default="1,100,500", help="agent counts, comma-separated; the first is the baseline")
    parser.add_argument("--publishes", type=int, default=20, help="measured publishes per agent count")
    parser.add_argument("--connect-per-s", type=float, default=500, help="agent connections opened per second")
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]

    prepare_database()
    django.setup()
    port = int(os.environ.get("BENCH_PORT", "8765"))
    env = {**os.environ, "LOG_LEVEL": "WARNING", "NODE_LOST_AFTER_S": "30"}
    loads = [load_text()]
    results = {}
    with daphnes(args.processes, port, env) as ports:
        for nodes in counts:
            results[nodes] = asyncio.run(measure(nodes, args.publishes, ports, args.connect_per_s))
            loads.append(load_text())
    base = statistics.median(results[counts[0]])
    print(
        f"publish -> last ACK recorded ({args.processes} daphne process(es), agents spread over them; Postgres, "
        f"Redis channel layer; {os.cpu_count()} cores shared with the fake agents)"
    )
    print(f"{'nodes':>6} {'p50':>9} {'p99':>9} {'max':>9} {f'p50 / {counts[0]}-node p50':>18}")
    for nodes, samples in results.items():
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        print(
            f"{nodes:>6} {p50 * 1000:>7.0f}ms {p99 * 1000:>7.0f}ms {max(samples) * 1000:>7.0f}ms {p50 / base:>17.1f}x"
        )
    print("machine load, before and after each row: " + "; ".join(loads))
    print("for comparison: vLLM production-stack's router re-reads its config every 10 s; LiteLLM polls every 30 s")


if __name__ == "__main__":
    main()
