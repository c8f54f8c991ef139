"""Automatic tuning against a plain grid: how many trials TPE needs to come within 5 % of the grid's best, judged on
confirmed measurements rather than single lucky draws.

vLLM's auto-tune script sweeps `max_num_seqs` and `max_num_batched_tokens` over a grid; this bench runs that grid as a
tuning study (sampler `grid`, every point once) and then a TPE study over the same two fields, the same replay and (by
default) the same budget, both through the product's own path: each trial saves a candidate version, publishes it to a
staging pool, waits for the agent's ACK after the engine's restart (both fields are cold) and replays the same
conversation log at a QPS that stresses the engine, `--repeats` times (the study option `replay.repeats`: the trial
scores the median P99 of its replays, repeat r on seed + r, so every trial sees the same arrival schedules).

Then the verdict, on confirmed values: the grid's best point, and each point a TPE trial claims within 5 % of it (or
TPE's best, if none claims), is measured again with `--confirm` replays on arrival schedules no study used (the same
for every point); the first TPE trial whose point is confirmed within 5 % of the grid's best point's confirmed value
counts, as a share of the grid's trials (target: at most 0.5). Printed: every trial (each replay's P99, the median,
errors, feasible), the claims, every confirmation's replays and spread, and the verdict.

The node is one real agent on the vLLM-protocol simulator (`engine_node.simulator`, a profile in this file): every
figure printed is **simulated**, not a vLLM measurement.

Run from the repository root with Postgres and Redis on 127.0.0.1 (as `make bench` does):
`.venv/bin/python bench/tuning.py [--duration 3] [--qps 40] [--seqs 2,4,8,16] [--tokens 8,16,32,64] [--seed 0]
[--repeats 3] [--confirm 5] [--tpe-budget N]`. A trial takes about 8 s (publish, engine restart) plus `--repeats` x
(`--duration` + ~1.5 s). Every process it starts is stopped on exit.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/controlplane_bench_tuning")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
os.environ.update(
    DATABASE_URL=DATABASE_URL,
    REDIS_URL=REDIS_URL,
    DJANGO_SETTINGS_MODULE="controlplane.settings",
    # Replays and studies run in this process's threads (embedded mode's path); daphne serves the agent.
    CELERY_TASK_ALWAYS_EAGER="1",
)
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-key-never-used-in-production")
sys.path.insert(0, str(ROOT))

# Replies of ~32 tokens at half the default step cost (~0.17 s alone): at 40 QPS a few sequences at a time cannot keep
# up, and a small token budget per step starves decoding and chunks every prefill.
PROFILE = """
latency:
  time_scale: 0.5
reply_length:
  median: 32
  sigma: 0.4
  min: 8
  max: 96
"""
WITHIN = 0.05
SEQS, TOKENS = "engine.max_num_seqs", "engine.max_num_batched_tokens"
# Confirmation replays use arrival schedules no study used.
CONFIRM_SEED_OFFSET = 1000


def prepare_database() -> None:
    import psycopg
    import redis

    name = DATABASE_URL.rsplit("/", 1)[1]
    with psycopg.connect(DATABASE_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    redis.Redis.from_url(REDIS_URL).flushdb()


def wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout_s}s waiting for {what}")


def world(work: Path):
    """Users, a staging pool with one simulator agent running the base version, and a stored log."""
    from controlplane.accounts.models import User
    from controlplane.nodes.models import EngineNode
    from controlplane.nodes.services.engine_nodes import node_create
    from controlplane.nodes.services.pools import pool_create, pool_publish
    from controlplane.params.services.templates import template_create, template_version_create
    from controlplane.params.services.whitelists import whitelist_create
    from tests.engine_node.fleet import AgentProcess
    from tests.live_server import Daphne
    from tests.replays.logs import log_lines, store_log

    sre = User.objects.create_user(username="sre", password="bench-pass-0123", role="sre")
    whitelist_create(actor=sre, name="legal", scenarios=["legal"])
    template = template_create(actor=sre, name="chat")
    base = template_version_create(
        actor=sre,
        template=template,
        document={"inference_params": {"warmup": {"enabled": False}, "batch": {"max_size": 16}}},
        base_number=None,
        comment="bench base",
    )
    pool = pool_create(actor=sre, name="staging", is_production=False)
    node, token = node_create(actor=sre, name="sim-1", pool=pool)
    server = Daphne(work)
    server.start()
    profile = work / "bench.yaml"
    profile.write_text(PROFILE)
    agent = AgentProcess(name=node.name, token=token, control_plane_url=server.ws_agent_url, work=work, profile=profile)
    agent.start()
    pool_publish(actor=sre, pool=pool, version=base, reason="bench base")
    wait_until(
        lambda: (
            EngineNode.objects.filter(applied_version=base, reported_status="online").exclude(gateway_url="").exists()
        ),
        120,
        "the simulator agent online with the base version",
    )
    log = store_log(sre, log_lines(2000), name="bench-log")
    return {"sre": sre, "pool": pool, "base": base, "log": log, "processes": (agent, server)}


def run_study(w, *, sampler: str, budget: int, args, seqs=None, tokens=None, repeats=None, seed=None, label=None):
    """One study through the product's path; prints every trial (each replay's P99 and their median)."""
    from controlplane.tuning.models import TuningStudy
    from controlplane.tuning.services import study_create

    repeats = repeats or args.repeats
    seed = args.seed if seed is None else seed
    started = time.monotonic()
    study = study_create(
        actor=w["sre"],
        pool=w["pool"],
        base_version=w["base"],
        log=w["log"],
        space=[
            {"path": SEQS, "type": "choice", "choices": seqs or args.seqs},
            {"path": TOKENS, "type": "choice", "choices": tokens or args.tokens},
        ],
        objective="min_p99",
        replay={"qps": args.qps, "duration_s": args.duration, "arrival": "poisson", "repeats": repeats},
        constraints={"p99_max_s": 30.0, "error_rate_max": 0.005},
        budget=budget,
        sampler=sampler,
        seed=seed,
        label=label or f"bench {sampler}",
        reason="bench: TPE against a plain grid",
    )
    timeout = budget * (repeats * (args.duration + 15) + 60)
    study = wait_until(
        lambda: (s := TuningStudy.objects.get(pk=study.pk)).status in ("succeeded", "failed", "cancelled") and s,
        timeout,
        f"the {sampler} study",
    )
    elapsed = time.monotonic() - started
    trials = list(
        study.trials.order_by("number").values("number", "params", "value", "measured", "is_feasible", "state", "steps")
    )
    for t in trials:
        t["p99s"] = [r["p99_s"] for step in t["steps"] for r in step.get("repeats", [step])]
    each = elapsed / max(len(trials), 1)
    print(f"\n{study.label}: {study.status}, {len(trials)} trials in {elapsed:.0f} s ({each:.1f} s each)")
    if study.error:
        print(f"  error: {study.error}")
    print(
        f"  {'#':>3} {'max_num_seqs':>12} {'batched_tokens':>14} {'P99 s':>7} {'errors':>7} feasible"
        "  each replay's P99 s"
    )
    for t in trials:
        m = t["measured"] or {}
        p99 = f"{m['p99_s']:.3f}" if m.get("p99_s") is not None else "—"
        rate = f"{m['error_rate']:.2%}" if m.get("error_rate") is not None else "—"
        print(
            f"  {t['number']:>3} {t['params'][SEQS]:>12} {t['params'][TOKENS]:>14} {p99:>7} {rate:>7} "
            f"{t['is_feasible']!s:>8}  {fmt(t['p99s'])}"
        )
    return trials


def confirm(w, at: tuple, args) -> dict:
    """Measure one point again, `--confirm` replays on arrival schedules no study used (seeds seed + 1000 + r, the same
    for every point confirmed): its confirmed value is their median."""
    trials = run_study(
        w,
        sampler="grid",
        budget=1,
        args=args,
        seqs=[at[0]],
        tokens=[at[1]],
        repeats=args.confirm,
        seed=args.seed + CONFIRM_SEED_OFFSET,
        label=f"confirm {at}",
    )
    values = [v for v in trials[0]["p99s"] if v is not None] if trials else []
    median = trials[0]["value"] if trials and trials[0]["is_feasible"] else None
    spread = (max(values) - min(values)) / median if values and median else None
    return {"median": median, "values": values, "spread": spread}


def fmt(values) -> str:
    return ", ".join(f"{v:.3f}" if v is not None else "—" for v in values)


def point(trial: dict) -> tuple:
    return trial["params"][SEQS], trial["params"][TOKENS]


def feasible(trials) -> list[dict]:
    return [t for t in trials if t["is_feasible"] and t["value"] is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=3, help="seconds of each replay")
    parser.add_argument("--qps", type=float, default=40.0)
    parser.add_argument("--seqs", default="2,4,8,16", help="max_num_seqs values of the grid")
    parser.add_argument("--tokens", default="8,16,32,64", help="max_num_batched_tokens values of the grid")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="replays per trial (the trial scores their median)")
    parser.add_argument("--confirm", type=int, default=5, help="replays per confirmation of a point")
    parser.add_argument("--tpe-budget", type=int, default=0, help="TPE trials (default: the grid's size)")
    parser.add_argument("--max-confirm", type=int, default=4, help="TPE points confirmed at most")
    args = parser.parse_args()
    args.seqs = [int(v) for v in args.seqs.split(",")]
    args.tokens = [int(v) for v in args.tokens.split(",")]
    grid_size = len(args.seqs) * len(args.tokens)
    tpe_budget = args.tpe_budget or grid_size

    prepare_database()
    import django

    django.setup()
    print(
        "Tuning bench (SIMULATED: one agent on the vLLM-protocol simulator, not vLLM; no figure here is a vLLM "
        f"measurement): grid {args.seqs} x {args.tokens} = {grid_size} points; each trial replays {args.duration} s "
        f"at {args.qps:g} QPS (Poisson) {args.repeats} times (seeds {args.seed}..{args.seed + args.repeats - 1}) and "
        f"scores the median P99; errors <= 0.5 %; TPE budget {tpe_budget}; confirmations: {args.confirm} replays each "
        f"(seeds from {args.seed + CONFIRM_SEED_OFFSET})"
    )
    processes = ()
    with tempfile.TemporaryDirectory(prefix="bench-tuning-") as tmp:
        from django.test import override_settings

        with override_settings(CONVERSATION_LOG_DIR=Path(tmp) / "logs"):
            try:
                w = world(Path(tmp))
                processes = w["processes"]
                grid = run_study(w, sampler="grid", budget=grid_size, args=args)
                tpe = run_study(w, sampler="tpe", budget=tpe_budget, args=args)
                verdict(w, grid, tpe, grid_size, args)
            finally:
                for process in processes:
                    process.stop()


def verdict(w, grid: list[dict], tpe: list[dict], grid_size: int, args) -> None:
    """Confirm the grid's best point and TPE's claims, then decide on confirmed values only."""
    if not feasible(grid):
        print("\nno feasible grid point: widen the ranges or lower --qps")
        return
    best = min(feasible(grid), key=lambda t: t["value"])
    near = best["value"] * (1 + WITHIN)
    print(f"\ngrid's best as measured: {best['value']:.3f} s at {point(best)} (trial {best['number']})")
    claims = [t for t in feasible(tpe) if t["value"] <= near]
    raw = claims[0]["number"] if claims else None
    print(
        f"TPE trials whose own median claims <= {near:.3f} s ({WITHIN:.0%} above it): "
        + (", ".join(f"{t['number']} {point(t)} {t['value']:.3f}" for t in claims) or "none")
    )
    if raw is not None:
        print(f"unconfirmed reading: first claim at trial {raw} = {raw / grid_size:.2f} of the grid's trials")
    # The points to confirm: the grid's best, then each claimed point in trial order (or TPE's best if none claims).
    candidates = [point(t) for t in claims]
    if not candidates and feasible(tpe):
        candidates = [point(min(feasible(tpe), key=lambda t: t["value"]))]
    todo = list(dict.fromkeys(c for c in candidates if c != point(best)))
    print(f"\nconfirming (seeds {args.seed + CONFIRM_SEED_OFFSET}.., {args.confirm} replays each):")
    confirmed = {point(best): confirm(w, point(best), args)}
    base = confirmed[point(best)]["median"]
    if base is None:
        print("the grid's best point missed the constraints when confirmed: no verdict")
        return
    bar = base * (1 + WITHIN)
    for at in todo[: args.max_confirm]:
        confirmed[at] = confirm(w, at, args)
        if confirmed[at]["median"] is not None and confirmed[at]["median"] <= bar:
            break  # later claims come later: they cannot make the verdict earlier
    if len(todo) > args.max_confirm:
        print(f"(only the first {args.max_confirm} of {len(todo)} claimed points confirmed: --max-confirm)")
    print(f"\n{'point':>10} {'confirmed P99 s':>15} {'spread':>7}  replays; first-pass trials")
    for at, c in confirmed.items():
        seen = [f"grid {t['number']}: {t['value']:.3f}" for t in grid if point(t) == at and t["value"] is not None]
        seen += [f"TPE {t['number']}: {t['value']:.3f}" for t in tpe if point(t) == at and t["value"] is not None]
        median = f"{c['median']:.3f}" if c["median"] is not None else "infeasible"
        spread = f"{c['spread']:.0%}" if c["spread"] is not None else "—"
        print(f"{at!s:>10} {median:>15} {spread:>7}  {fmt(c['values'])}; {', '.join(seen)}")
    print(f"\nbaseline: the grid's best point confirmed at {base:.3f} s; within {WITHIN:.0%}: <= {bar:.3f} s")
    within = {at for at, c in confirmed.items() if c["median"] is not None and c["median"] <= bar}
    reached = next((t["number"] for t in tpe if point(t) in within), None)
    if reached is None:
        print(
            f"VERDICT (simulated): TPE never reached a point confirmed within {WITHIN:.0%} in {len(tpe)} trials: "
            "target (at most half the grid's trials) NOT met"
        )
        return
    share = reached / grid_size
    print(
        f"VERDICT (simulated): TPE reached a point confirmed within {WITHIN:.0%} at trial {reached} "
        f"{point(tpe[reached - 1])}"
        f" = {reached}/{grid_size} = {share:.2f} of the grid's trials: target (<= 0.5) "
        + ("met" if share <= 0.5 else "NOT met")
    )


if __name__ == "__main__":
    main()
