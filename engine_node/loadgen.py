"""Synthetic chat traffic for demos and load tests: customer-service messages at a steady rate.

`LOADGEN_API_KEY=cpk_... python -m engine_node.loadgen --qps 4 http://127.0.0.1:9101 http://127.0.0.1:9102`

Arrivals are open-loop (sent on schedule, whatever the latency) at `--qps` on average: Poisson by default, as users
arrive; `--arrivals even` spaces them exactly 1/qps apart, so that a few seconds of traffic carry the same load as
the next few (a test comparing short windows). Either schedule is kept against the clock: a process starved for a
moment sends what it owes (a second's worth at most), so the rate holds on a busy machine.
"""

import argparse
import asyncio
import contextlib
import itertools
import logging
import os
import random
import signal

import aiohttp

log = logging.getLogger("engine_node.loadgen")

RETRIES = 2
MAX_RETRY_WAIT_S = 10
HEALTH_PERIOD_S = 2.0
# Arrivals owed after a stall are sent at once, up to this many seconds' worth (the rest are skipped, not queued).
MAX_CATCH_UP_S = 1.0

MESSAGES = [
    "我的订单 20261111-8842 到哪了？已经三天没动了",
    "Where is my order #A7731920? It says shipped but nothing since Monday",
    "退货退款要多久到账？我昨天已经寄回了",
    "双十一有什么适合送妈妈的护肤品推荐吗",
    "Can you recommend a laptop bag under 200 yuan?",
    "优惠券为什么用不了，满300减50的那张",
    "我付了 ¥299.00 但是订单显示未支付",
    "How do I change the phone number on my account?",
    "帮我写一段618活动的商品文案，主打保温杯",
    "What is your return policy for opened electronics?",
    "物流显示已签收但我没收到，怎么办",
    "这个耳机和上一代有什么区别？值得换吗",
]


ARRIVALS = ("poisson", "even")


async def run(
    urls: list[str], qps: float, model: str, duration_s: float | None, api_key: str = "", arrivals: str = "poisson"
) -> None:
    rng = random.Random(7)
    gap = (lambda: rng.expovariate(qps)) if arrivals == "poisson" else (lambda: 1.0 / qps)
    turn = itertools.count()
    # As a load balancer does: only nodes whose /healthz says online get traffic (a warming node says 503).
    online: list[str] = []
    stats = {"ok": 0, "failed": 0, "retried": 0}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60), headers=headers) as session:

        async def one(url: str) -> None:
            body = {
                "model": model,
                "messages": [{"role": "user", "content": rng.choice(MESSAGES)}],
                "max_tokens": rng.choice([64, 128, 256]),
                "stream": rng.random() < 0.5,
            }
            # As the official openai client does: a 429 or 503 with Retry-After (a full queue, a node warming up) is
            # tried again after that many seconds, twice at most.
            for attempt in range(RETRIES + 1):
                try:
                    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
                        await response.read()
                        retry_after = response.headers.get("Retry-After", "")
                        status = response.status
                except (aiohttp.ClientError, TimeoutError):
                    stats["failed"] += 1
                    return
                except RuntimeError as exc:  # aiohttp's "Connection closed." when a node stops mid-reply
                    if "closed" not in str(exc).lower():
                        raise
                    stats["failed"] += 1
                    return
                if status in (429, 503) and retry_after.isdigit() and attempt < RETRIES:
                    stats["retried"] += 1
                    await asyncio.sleep(min(int(retry_after), MAX_RETRY_WAIT_S))
                    continue
                stats["ok" if status == 200 else "failed"] += 1
                return

        async def watch_health() -> None:
            while True:
                states = await asyncio.gather(*(healthy(session, url) for url in urls))
                online[:] = [url for url, ok in zip(urls, states, strict=True) if ok]
                await asyncio.sleep(HEALTH_PERIOD_S)

        watcher = asyncio.create_task(watch_health())
        pending: set[asyncio.Task] = set()
        loop = asyncio.get_running_loop()
        started = due = loop.time()
        for i in itertools.count():
            if duration_s is not None and loop.time() - started > duration_s:
                break
            if online:
                task = asyncio.create_task(one(online[next(turn) % len(online)]))
                pending.add(task)
                task.add_done_callback(pending.discard)
            if i % max(1, int(qps * 30)) == 0 and i:
                log.info("synthetic traffic: %(ok)d ok, %(failed)d failed, %(retried)d retries", stats)
            due = max(due + gap(), loop.time() - MAX_CATCH_UP_S)
            await asyncio.sleep(max(0.0, due - loop.time()))
        watcher.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


async def healthy(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(f"{url}/healthz", timeout=aiohttp.ClientTimeout(total=2)) as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m engine_node.loadgen", description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="+", help="gateway base URLs of the nodes to load")
    parser.add_argument("--qps", type=float, default=4.0, help="mean requests per second over all nodes")
    parser.add_argument(
        "--arrivals", choices=ARRIVALS, default="poisson", help="Poisson arrivals (default) or evenly spaced ones"
    )
    parser.add_argument("--model", default="simulated-chat-model", help="model name to send")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: never)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("LOADGEN_API_KEY", ""),
        help="gateway client key sent as Authorization: Bearer [LOADGEN_API_KEY]",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s loadgen %(message)s")
    asyncio.run(_until_stopped(run(args.urls, args.qps, args.model, args.duration, args.api_key, args.arrivals)))


async def _until_stopped(work) -> None:
    """Run `work` until it ends or SIGTERM/SIGINT arrives; a stop is quiet (no traceback) and immediate."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


if __name__ == "__main__":
    main()
