"""End-to-end freshness of live metrics: from a sample leaving an agent to its figures arriving in a browser.

One daphne process serves the control plane (Postgres, Redis channel layer, production settings), or several
(`--processes`: agents and browsers spread over them round-robin). In this benchmark's own process, N fake agents
(WebSocket clients authenticated with real node tokens) send one contract-A sample a second each, spread evenly over
the second, with `t` = the time of sending; B fake browsers (WebSocket clients signed in with a real session cookie
and Origin, like a dashboard tab) watch the fleet group. For every `metrics.sample` event a browser receives,
freshness = receive time - the event's `t` (the newest sample the event's figures include). Everything shares the
machine's cores: daphne, Postgres, Redis, the fake agents and the fake browsers. The baseline is the same pipeline
with 1 agent and 1 browser, measured in the same run. `--saturate-core` adds a row measured while another process
spins on one core (another job on the machine). Browsers confirm each frame as the dashboard does
(`controlplane/metrics/coalescing.py`); frames a browser was spared because it had fallen behind count as thinned.
"""

import argparse
import asyncio
import bisect
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/controlplane_bench_metrics")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
os.environ.update(DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL, DJANGO_SETTINGS_MODULE="controlplane.settings")
# A benchmark database on Postgres: the settings refuse the embedded key there.
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-key-never-used-in-production")
sys.path.insert(0, str(ROOT))

from bench.control_planes import busy_core, daphnes, load_text  # noqa: E402 - after the path and environment are set

WARMUP_S = 5
MEASURE_S = int(os.environ.get("BENCH_MEASURE_S", "30"))


def prepare_database() -> None:
    import psycopg
    import redis

    name = DATABASE_URL.rsplit("/", 1)[1]
    with psycopg.connect(DATABASE_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    redis.Redis.from_url(REDIS_URL).flushdb()


def sample(t: float, i: int) -> dict:
    """A complete contract-A sample with figures that move a little from second to second."""
    return {
        "type": "sample",
        "t": t,
        "window_s": 10,
        "m": {
            "qps": 50.0 + i % 7,
            "latency_p50_s": 0.6,
            "latency_p99_s": 1.3 + (i % 5) / 20,
            "latency_p999_s": 2.1,
            "ttft_p50_s": 0.2,
            "ttft_p99_s": 0.5,
            "error_rate": 0.001,
            "rejected_rate": 0.0,
            "requests_running": 24.0,
            "requests_waiting": 3.0,
            "kv_cache_usage": 0.61,
            "queue_depth_short": 2,
            "queue_depth_long": 0,
            "batch_size_mean": 11.5,
            "batch_size_hist": {"8": 20, "12": 25, "16": 5},
            "batch_efficiency": 0.71,
            "batch_idle_ratio": 0.08,
            "spec_acceptance_rate": 0.74,
            "spec_rejection_rate": 0.26,
            "fragmentation_ratio": 0.14,
            "gpu_util": 0.72,
            "sm_util": None,
            "gpu_memory_used": 0.91,
            "batch_timeout_rate": 0.0,
            "length_hist": {"le256": 300, "le512": 120, "le1k": 60, "le2k": 15, "gt2k": 5},
            "long_request_share": 0.04,
            "intents": {"order_status": 250, "refund": 120, "product_info": 130},
            "tiers": {"strict": 180, "normal": 300, "creative": 20},
            "degraded": 0,
            "engine_restarts": 0,
        },
    }


async def fake_agent(session, url: str, token: str, offset_s: float, stop: asyncio.Event, run: dict) -> None:
    async with session.ws_connect(url, headers={"Authorization": f"Bearer {token}"}) as ws:
        await ws.receive()  # welcome
        run["connected"] += 1
        await asyncio.sleep(offset_s)
        i = 0
        next_at = time.monotonic()
        while not stop.is_set():
            t, counted = time.time(), run["sampling"]  # read together: no other coroutine runs in between
            await ws.send_str(json.dumps(sample(t, i)))
            if counted:
                run["sent"].append(t)
            i += 1
            next_at += 1.0
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def fake_browser(
    session, url: str, headers: dict, run: dict, stop: asyncio.Event, events: list, thinned: list
) -> None:
    """Keeps (event t, receive time) of every fleet event while the run records, and the frames it was spared."""
    async with session.ws_connect(url, headers=headers) as ws:
        run["browsers"] += 1
        async for message in ws:
            received = time.time()
            event = json.loads(message.data)
            if event.get("type") == "metrics.sample":
                # Confirmed as the dashboard confirms it: the server sends only a few frames ahead of receipts.
                await ws.send_str(json.dumps({"type": "metrics.received", "seq": event["seq"]}))
                if run["recording"]:
                    events.append((event["t"], received))
                    thinned[0] = event["thinned"]  # the connection's running count
            if stop.is_set():
                break


def per_sample_lags(sent: list[float], events: list[tuple[float, float]]) -> list[float]:
    """For each sample, the time until this browser got the first event whose figures are at least that recent:
    the fleet event carries the newest sample's `t`, so the first event with t >= a sample's t is the flush that
    took it in (agents on one host: a sample that overtook an older one on its way in is the rare exception)."""
    ts = [t for t, _ in events]
    lags = []
    for sent_t in sent:
        i = bisect.bisect_left(ts, sent_t)
        if i < len(events):
            lags.append(events[i][1] - sent_t)
    return lags


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(agents: int, browsers: int, ports: list[int], label: str) -> dict:
    import aiohttp
    from asgiref.sync import sync_to_async

    from controlplane.accounts.models import User
    from controlplane.metrics.models import MetricSample
    from controlplane.nodes.models import EngineNode, Pool
    from controlplane.nodes.tokens import token_generate, token_hash

    def setup():
        from django.test import Client

        pools = [Pool.objects.get_or_create(name=f"bench-{label}-{p}")[0] for p in range(max(1, agents // 50))]
        tokens = [token_generate() for _ in range(agents)]
        EngineNode.objects.bulk_create(
            EngineNode(name=f"m{label}-{i}", pool=pools[i % len(pools)], token_hash=token_hash(t), token_prefix=t[:12])
            for i, t in enumerate(tokens)
        )
        viewer = User.objects.get_or_create(username="bench-viewer", defaults={"role": "oncall"})[0]
        client = Client()
        client.force_login(viewer)
        return tokens, client.cookies["sessionid"].value

    def stored_rows(since, until):
        return MetricSample.objects.filter(t__gte=since, t__lt=until, name__startswith=f"m{label}-").count()

    tokens, session_id = await sync_to_async(setup)()
    bases = [f"ws://127.0.0.1:{port}" for port in ports]
    stop = asyncio.Event()
    run = {"connected": 0, "browsers": 0, "sent": [], "sampling": False, "recording": False}
    received: list[list] = [[] for _ in range(browsers)]
    thinned: list[list] = [[0] for _ in range(browsers)]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        watchers = []
        for b in range(browsers):
            port = ports[b % len(ports)]
            headers = {"Origin": f"http://127.0.0.1:{port}", "Cookie": f"sessionid={session_id}"}
            url = f"ws://127.0.0.1:{port}/ws/metrics/fleet/"
            watchers.append(
                asyncio.create_task(fake_browser(session, url, headers, run, stop, received[b], thinned[b]))
            )
        senders = []
        for i, token in enumerate(tokens):
            offset = i / agents  # spread the agents' sends evenly over each second
            url = f"{bases[i % len(bases)]}/ws/agent/"
            senders.append(asyncio.create_task(fake_agent(session, url, token, offset, stop, run)))
            await asyncio.sleep(0.005)
        while run["connected"] < agents or run["browsers"] < browsers:
            await asyncio.sleep(0.1)
        await asyncio.sleep(WARMUP_S)
        started_at = datetime.now(UTC)  # a sample is counted exactly when its `t` falls in [started_at, ended_at)
        run["recording"] = run["sampling"] = True
        await asyncio.sleep(MEASURE_S)
        ended_at = datetime.now(UTC)
        run["sampling"] = False
        await asyncio.sleep(1)  # the last samples' events
        run["recording"] = False
        stop.set()
        await asyncio.sleep(1.5)
        for task in [*senders, *watchers]:
            task.cancel()
        await asyncio.gather(*senders, *watchers, return_exceptions=True)
    await asyncio.sleep(1.5)  # the ingestor's writer finishes its queue
    stored = await sync_to_async(stored_rows)(started_at, ended_at)
    sent = run["sent"]
    return {
        "per_event": [received_at - t for events in received for t, received_at in events if t < sent[-1]],
        "per_sample": [lag for events in received for lag in per_sample_lags(sent, events)],
        "sent": len(sent),
        "stored": stored,
        "events_per_browser_s": sum(len(events) for events in received) / browsers / (MEASURE_S + 1),
        "thinned": sum(count for (count,) in thinned),
    }


def main() -> None:
    import django

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=1, help="daphne processes agents and browsers are spread over")
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--browsers", type=int, default=20)
    parser.add_argument("--saturate-core", action="store_true", help="add a row with another process spinning a core")
    args = parser.parse_args()

    prepare_database()
    django.setup()
    port = int(os.environ.get("BENCH_PORT", "8766"))
    env = {**os.environ, "LOG_LEVEL": "WARNING", "NODE_LOST_AFTER_S": "30", "DJANGO_ALLOWED_HOSTS": "127.0.0.1"}
    rows = [("baseline", 1, 1, False), ("quiet", args.agents, args.browsers, False)]
    if args.saturate_core:
        rows.append(("one core busy", args.agents, args.browsers, True))
    results, loads = {}, {}
    with daphnes(args.processes, port, env) as ports:
        for i, (name, agents, browsers, saturate) in enumerate(rows):
            with busy_core(saturate):
                results[name] = asyncio.run(measure(agents, browsers, ports, label=f"{i}x{agents}"))
                loads[name] = load_text()
            print(f"  {name}: {agents} agents / {browsers} browsers measured ({loads[name]})", flush=True)
    print(
        f"metrics freshness, agent send -> browser receive ({MEASURE_S} s per row; {args.processes} daphne "
        f"process(es), Postgres, Redis layer; {os.cpu_count()} cores shared by daphne, Postgres, Redis, the fake "
        "agents and the fake browsers)"
    )
    base = {kind: statistics.median(results["baseline"][kind]) for kind in ("per_event", "per_sample")}
    print(
        f"{'row':>14} {'agents':>6} {'browsers':>8} {'measured':>10} {'p50':>7} {'p99':>7} {'max':>7} "
        f"{'p50/base':>8} {'p99/base p99':>12} {'events/s/browser':>16} {'thinned':>7} {'samples stored':>15}"
    )
    base_p99 = {kind: percentile(results["baseline"][kind], 0.99) for kind in ("per_event", "per_sample")}
    for name, agents, browsers, _ in rows:
        r = results[name]
        for kind in ("per_event", "per_sample"):
            lags = r[kind]
            p50, p99 = percentile(lags, 0.5), percentile(lags, 0.99)
            print(
                f"{name:>14} {agents:>6} {browsers:>8} {kind:>10} {p50 * 1000:>5.0f}ms {p99 * 1000:>5.0f}ms "
                f"{max(lags) * 1000:>5.0f}ms {p50 / base[kind]:>7.1f}x {p99 / base_p99[kind]:>11.1f}x "
                f"{r['events_per_browser_s']:>16.1f} {r['thinned']:>7} {r['stored']:>7}/{r['sent']:<7}"
            )
    print("target: p99 under 1 s with 200 nodes at 1 Hz and 20 browsers. per_event: receive time - the event's `t`,")
    print("the newest sample in that flush's fleet figures. per_sample: for every sample, until a browser got the")
    print("first fleet event at least that recent (includes waiting for the next 250 ms flush). thinned: fleet frames")
    print("the browsers were spared because they had not confirmed the ones before (all browsers, since connecting).")


if __name__ == "__main__":
    main()
