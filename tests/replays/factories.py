"""Finished replay runs with request rows, built directly (the runner's own tests cover how rows are produced)."""

import random

from django.utils import timezone

from controlplane.replays.models import ReplayRequest, ReplayRun


def finished_run(
    *,
    actor,
    pool,
    version,
    median_s: float = 1.0,
    n: int = 400,
    seed: int = 1,
    log_name: str = "festival",
    status: str = ReplayRun.Status.SUCCEEDED,
    errors: float = 0.0,
    qps: float = 50.0,
    intents=("order_status", "coupon", "refund"),
    slow_intent: str | None = None,
    pool_metrics: dict | None = None,
    qps_steps: tuple[float, ...] = (),
    step_s: int | None = None,
    slo_p99_s: float | None = None,
) -> ReplayRun:
    """A run of `n` requests, `qps` apart, whose latency is lognormal around `median_s` (x3 for `slow_intent`); a
    continued request shows its first round after 60 % of its time. With `qps_steps`, a ladder run whose n requests
    are spread evenly over its steps of `step_s` seconds, judged against `slo_p99_s` (None: the report's 1.8 s)."""
    now = timezone.now()
    ladder = {
        "pacing": ReplayRun.Pacing.LADDER,
        "qps": None,
        "qps_steps": list(qps_steps),
        "step_s": step_s,
        "slo_p99_s": slo_p99_s,
    }
    run = ReplayRun.objects.create(
        pool=pool,
        template_version=version,
        template_hash=version.content_hash if version else "",
        log_name=log_name,
        **(ladder if qps_steps else {"qps": qps}),
        duration_cap_s=600,
        status=status,
        created_by=actor,
        reason="test",
        started_at=now,
        finished_at=now,
        planned=n,
        pool_metrics=pool_metrics or {},
    )
    rng = random.Random(seed)
    rows = []
    for seq in range(n):
        intent = intents[seq % len(intents)]
        failed = rng.random() < errors
        e2e = rng.lognormvariate(0, 0.4) * median_s * (3 if intent == slow_intent else 1)
        reply_tokens = 0 if failed else rng.randint(40, 256)
        rounds = 0 if failed else rng.choice((0, 0, 0, 1))
        due = seq / qps
        if qps_steps:
            per_step = n // len(qps_steps)
            due = min(seq // per_step, len(qps_steps) - 1) * step_s + (seq % per_step) * step_s / per_step
        rows.append(
            ReplayRequest(
                run=run,
                seq=seq,
                conversation_id=f"c{seq}",
                intent=intent,
                tier="normal",
                node_name="sim-1",
                scheduled_at=due,
                sent_at=due,
                status_code=503 if failed else 200,
                ok=not failed,
                error="queue timeout" if failed else "",
                e2e_s=0.01 if failed else e2e,
                ttft_s=None if failed else e2e / 8,
                first_round_s=None if failed else (e2e * 0.6 if rounds else e2e),
                reply_tokens=reply_tokens,
                prompt_tokens=30,
                continuation_rounds=rounds,
                max_tokens=256,
            )
        )
    ReplayRequest.objects.bulk_create(rows)
    ReplayRun.objects.filter(pk=run.pk).update(sent=n, done=n)
    run.refresh_from_db()
    return run
