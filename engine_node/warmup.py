"""Warmup runs: replay the pool's warmup dataset through the engine before the node takes user traffic.

The seed's cold-start plan (冷启动优化方案): load a fraction of the inference capacity (5 %), start at
concurrency 2 and re-evaluate every 30 s, and judge health on the latency distribution of the first 100
requests. Here "capacity" is the engine's `engine.max_num_seqs`, the sequences it runs at once, so the ramp's
cap is max(initial_concurrency, ceil(capacity_fraction x max_num_seqs)): 4 with the defaults (64 sequences).

The messages go to the engine directly (the user gate stays closed meanwhile) as chat requests with the
template's policy applied, as the gateway would (temperature tier, max_tokens cap). Every `step_s` the
concurrency rises by one while the requests finished in that step stay healthy. Once the first
`check_requests` requests (or the whole dataset, if smaller) have finished, the check decides: pass when their
P99 is at most `max_p99_s` and their error rate at most `max_error_rate`. A failed check stops the run at once;
a passed one carries on to the dataset's end, since every replayed query warms the prefix cache, bounded by
`max_duration_s`. A check not reached within `max_duration_s` fails.
"""

import asyncio
import hashlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable

import aiohttp

from engine_node.forwarding import apply_decision
from engine_node.policy.explain import estimate_tokens
from engine_node.policy.rules import Policy

log = logging.getLogger("engine_node.warmup")

# The `warmup` section's defaults, copied from controlplane/params/schema.py because engine_node never imports
# the control plane; tests/engine_node/test_warmup_units.py fails when the two drift apart.
DEFAULTS = {
    "enabled": True,
    "capacity_fraction": 0.05,
    "initial_concurrency": 2,
    "step_s": 30,
    "check_requests": 100,
    "max_p99_s": 2.0,
    "max_error_rate": 0.0,
    "max_duration_s": 300,
}
DEFAULT_MAX_NUM_SEQS = 64
# Progress goes to the control plane at most this often (and at every state change).
PROGRESS_PERIOD_S = 0.5

Progress = Callable[[dict], Awaitable[None]]


def warmup_params(content: dict | None) -> dict:
    """The `warmup` section of the applied parameters over the defaults (an older control plane sends none)."""
    section = (content or {}).get("warmup")
    return {**DEFAULTS, **(section if isinstance(section, dict) else {})}


def concurrency_cap(params: dict, max_num_seqs: int | None) -> int:
    """The most warmup requests in flight: the capacity fraction of the engine's concurrent sequences."""
    capacity = max_num_seqs if isinstance(max_num_seqs, int) and max_num_seqs > 0 else DEFAULT_MAX_NUM_SEQS
    initial = max(1, int(params["initial_concurrency"]))
    return max(initial, math.ceil(float(params["capacity_fraction"]) * capacity))


def messages_sha256(messages: list) -> str:
    """The sha256 of the messages' canonical JSON, as the control plane computes it for a dataset version."""
    text = json.dumps(messages, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def percentile(values: list[float], share: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class WarmupRunner:
    """Runs one warmup at a time against the engine and keeps the last progress for /healthz and the hello."""

    def __init__(self, *, engine_url: Callable[[], str]):
        self.engine_url = engine_url
        self.state = "idle"
        self.progress: dict = {"state": "idle"}
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def skip(self, reason: str, *, trigger: str) -> dict:
        """No run: recorded so the node page says why (no dataset, warmup turned off)."""
        self.state = "skipped"
        self.progress = {"state": "skipped", "trigger": trigger, "reason": reason, "finished_at": round(time.time(), 3)}
        log.info("warmup skipped (%s): %s", trigger, reason)
        return self.progress

    async def run(
        self,
        *,
        messages: list[dict],
        params: dict,
        policy: Policy,
        max_num_seqs: int | None,
        trigger: str,
        on_progress: Progress,
    ) -> dict:
        """One warmup; returns the final progress document, whose `state` is "passed" or "failed"."""
        started = time.monotonic()
        deadline = started + float(params["max_duration_s"])
        cap = concurrency_cap(params, max_num_seqs)
        concurrency = min(cap, max(1, int(params["initial_concurrency"])))
        check_n = min(int(params["check_requests"]), len(messages))
        max_p99_s, max_error_rate = float(params["max_p99_s"]), float(params["max_error_rate"])
        step_s = float(params["step_s"])
        latencies: dict[int, float] = {}
        failed: set[int] = set()
        step_latencies: list[float] = []
        step_errors = 0
        next_step = started + step_s
        verdict: dict | None = None
        sent_progress_at = float("-inf")
        self.state = "running"
        model = await self._model_name()

        def document(state: str) -> dict:
            values = list(latencies.values())
            return {
                "state": state,
                "trigger": trigger,
                "done": len(latencies),
                "total": len(messages),
                "check_requests": check_n,
                "p50": _round(percentile(values, 0.50)),
                "p99": _round(percentile(values, 0.99)),
                "errors": len(failed),
                "concurrency": concurrency,
                "max_concurrency": cap,
                "max_p99_s": max_p99_s,
                "elapsed_s": round(time.monotonic() - started, 3),
            }

        async def report(state: str, *, force: bool = False) -> None:
            nonlocal sent_progress_at
            self.progress = document(state)
            now = time.monotonic()
            if force or now - sent_progress_at >= PROGRESS_PERIOD_S:
                sent_progress_at = now
                try:
                    await on_progress(self.progress)
                except Exception:
                    log.exception("sending warmup progress failed")

        async def one(index: int) -> None:
            nonlocal step_errors
            body = self._body(messages[index], policy, model)
            begun = time.monotonic()
            ok = await self._send(body, timeout_s=max(1.0, deadline - begun))
            elapsed = time.monotonic() - begun
            latencies[index] = elapsed
            step_latencies.append(elapsed)
            if not ok:
                failed.add(index)
                step_errors += 1

        await report("running", force=True)
        running: set[asyncio.Task] = set()
        position = 0
        reason = ""
        try:
            while True:
                while len(running) < concurrency and position < len(messages):
                    running.add(asyncio.create_task(one(position)))
                    position += 1
                if not running:
                    break
                now = time.monotonic()
                if now >= deadline:
                    break
                _, running = await asyncio.wait(
                    running, timeout=min(deadline, next_step) - now, return_when=asyncio.FIRST_COMPLETED
                )
                now = time.monotonic()
                if verdict is None and check_n and all(i in latencies for i in range(check_n)):
                    verdict = self._check(latencies, failed, check_n, max_p99_s, max_error_rate)
                    if not verdict["passed"]:
                        break
                if now >= next_step:
                    # Raise only while the step was healthy: its finished requests within the P99 line and the
                    # error budget (a step in which nothing finished is not evidence of health).
                    healthy = (
                        step_latencies
                        and max(step_latencies) <= max_p99_s
                        and step_errors / len(step_latencies) <= max_error_rate
                    )
                    if healthy and concurrency < cap:
                        concurrency += 1
                        log.info("warmup concurrency raised to %d", concurrency)
                    step_latencies.clear()
                    step_errors = 0
                    next_step = now + step_s
                await report("running")
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        if verdict is None and check_n == 0:
            verdict = {"passed": True, "p99": None, "error_rate": 0.0}
            reason = "the dataset has no messages"
        if verdict is None:
            reason = (
                f"warmup failed: only {sum(1 for i in range(check_n) if i in latencies)} of the first {check_n} "
                f"requests finished within warmup.max_duration_s ({params['max_duration_s']}s)"
            )
            state = "failed"
        elif verdict["passed"]:
            state = "passed"
            reason = reason or (
                f"p99 {verdict['p99']:.3f} s <= {max_p99_s:g} s over the first {check_n} requests, "
                f"error rate {verdict['error_rate']:.1%}"
            )
        else:
            state = "failed"
            reason = verdict["reason"]
        self.state = state
        await report(state, force=True)
        self.progress.update(reason=reason, finished_at=round(time.time(), 3))
        if verdict is not None:
            self.progress.update(check_p99=_round(verdict["p99"]), check_error_rate=verdict["error_rate"])
        log.info("warmup (%s) %s: %s", trigger, state, json.dumps(self.progress))
        return self.progress

    @staticmethod
    def _check(latencies: dict, failed: set, check_n: int, max_p99_s: float, max_error_rate: float) -> dict:
        first = [latencies[i] for i in range(check_n)]
        p99 = percentile(first, 0.99)
        error_rate = sum(1 for i in range(check_n) if i in failed) / check_n
        if p99 > max_p99_s:
            reason = f"warmup failed: p99 {p99:.2f} s > {max_p99_s:g} s over the first {check_n} requests"
        elif error_rate > max_error_rate:
            reason = (
                f"warmup failed: error rate {error_rate:.1%} > {max_error_rate:.1%} over the first {check_n} requests"
            )
        else:
            return {"passed": True, "p99": p99, "error_rate": round(error_rate, 4)}
        return {"passed": False, "p99": p99, "error_rate": round(error_rate, 4), "reason": reason}

    @staticmethod
    def _body(message: dict, policy: Policy, model: str | None) -> dict:
        text = str(message.get("text", ""))
        decision = policy.decide(
            text, prompt_tokens=estimate_tokens(text), business_tag=message.get("business_tag") or None
        )
        body: dict = {"messages": [{"role": "user", "content": text}]}
        if model:
            body["model"] = model
        return apply_decision(body, decision)

    async def _model_name(self) -> str | None:
        """The engine's served model (vLLM refuses a request for another name); None lets the engine choose."""
        try:
            async with self._http().get(
                f"{self.engine_url()}/v1/models", timeout=aiohttp.ClientTimeout(total=10)
            ) as response:
                data = await response.json(content_type=None)
            return str(data["data"][0]["id"])
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError):
            return None

    async def _send(self, body: dict, *, timeout_s: float) -> bool:
        try:
            async with self._http().post(
                f"{self.engine_url()}/v1/chat/completions",
                json=body,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as response:
                await response.read()
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False
