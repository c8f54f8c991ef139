"""Automatic tuning against a plain grid: how many trials TPE needs to come within 5 % of the grid's best, judged on
confirmed measurements, for several seeds.

vLLM's auto-tune script sweeps `max_num_seqs` and `max_num_batched_tokens` over a grid; this bench runs that grid as a
tuning study (sampler `grid`, every point once) and then a TPE study over the same two fields, the same replay and (by
default) the same budget, both through the product's own path: each trial saves a candidate version, publishes it to a
staging pool, waits for the agent's ACK after the engine's restart (both fields are cold) and replays the same
conversation log at a QPS that stresses the engine `--repeats` times (the study option `replay.repeats`, repeat r on
seed + r: every trial of a seed replays the same arrival schedules) and scores the P99 of the repeats' requests pooled
(`replay.repeats_p99=pooled`; `--p99 median` scores the median of the repeats' P99s instead).

Then the verdict per seed, on confirmed values: the grid's best point, and each point a TPE trial claims within 5 % of
it (or TPE's best, if none claims), is measured again exactly as the studies measured it (same schedules, same P99),
so what differs is the machine's own noise; the first TPE trial whose point is confirmed within 5 % of the grid's best
point's confirmed value counts, as a share of the grid's trials (target: at most 0.5). Printed: every trial (each
replay's P99, the trial's P99, errors, feasible), the claims, every confirmation, the verdict per seed and overall.
`--noise N` only measures one point N times on one schedule and once on N schedules: where its noise comes from.

The node is one real agent on the vLLM-protocol simulator (`engine_node.simulator`, a profile in this file): every
figure printed is **simulated**, not a vLLM measurement.

Run from the repository root with Postgres and Redis on 127.0.0.1 (as `make bench` does):
`.venv/bin/python bench/tuning.py [--seeds 0,1,2] [--duration 3] [--qps 40] [--seqs 2,4,8,16] [--tokens 8,16,32,64]
[--repeats 3] [--p99 pooled|median] [--tpe-budget N] [--noise N [--noise-point 16,32]]`. A trial takes about 8 s
(publish, engine restart) plus `--repeats` x (`--duration` + ~2 s); a seed about 14 minutes on two shared cores. Every
process it starts is stopped on exit.
"""

import argparse
import os
import statistics
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
        replay={
            "qps": args.qps,
            "duration_s": args.duration,
            "arrival": "poisson",
            "repeats": repeats,
            "repeats_p99": args.p99,
        },
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


def confirm(w, at: tuple, seed: int, args) -> dict:
    """Measure one point again exactly as the studies did (the same `--repeats` schedules, seeds seed..seed+k-1, the
    same P99): what differs from the first measurement is the machine's own noise, not the arrivals."""
    trials = run_study(
        w, sampler="grid", budget=1, args=args, seqs=[at[0]], tokens=[at[1]], seed=seed, label=f"confirm {at}"
    )
    value = trials[0]["value"] if trials and trials[0]["is_feasible"] else None
    return {"value": value, "values": trials[0]["p99s"] if trials else []}


def trial_records(trial: dict) -> list[dict]:
    """Every request of every replay of the trial."""
    from controlplane.replays.figure_selectors import run_records
    from controlplane.replays.models import ReplayRun

    runs = [r["run"] for step in trial["steps"] for r in step.get("repeats", [step])]
    return [rec for run in ReplayRun.objects.filter(pk__in=runs) for rec in run_records(run=run)]


def pooled_p99(records: list[dict]) -> float | None:
    """Nearest-rank P99 of the successful requests of several replays taken together."""
    from controlplane.replays.figures import percentile_of

    return percentile_of(sorted(float(r["e2e_s"]) for r in records if r["ok"] and r["e2e_s"] is not None), 99)


def send_lag(records: list[dict]) -> str:
    """How late the replay client sent its requests against their schedule (machine noise on the client side)."""
    lags = sorted(
        r["sent_at"] - r["scheduled_at"] for r in records if r["sent_at"] is not None and r["scheduled_at"] is not None
    )
    if not lags:
        return "—"
    return f"median {lags[len(lags) // 2] * 1000:.0f} ms, max {lags[-1] * 1000:.0f} ms"


def spread(values) -> str:
    values = [v for v in values if v is not None]
    return f"{(max(values) - min(values)) / statistics.median(values):.0%}" if values else "—"


def noise(w, at: tuple, args) -> None:
    """Where one point's noise comes from, and what is left of it in a trial's score:
    1. one schedule (seed s) replayed `--noise` times: the machine's and the timing's noise alone (the simulator's
       reply lengths follow from each request's content and its seed, so the requests are the same every time);
    2. `--noise` schedules (seeds s..): what the arrivals add;
    3. the point measured `--noise` times as a trial measures it (`--repeats` schedules, both P99 forms from the same
       replays): the noise left in the objective the samplers see."""
    one = dict(w=w, sampler="grid", budget=1, args=args, seqs=[at[0]], tokens=[at[1]])
    same = [run_study(**one, repeats=1, label=f"same schedule {r}")[0] for r in range(args.noise)]
    many = run_study(**one, repeats=args.noise, label="schedules")[0]
    trials = [run_study(**one, label=f"as a trial {r}")[0] for r in range(args.noise)]
    print(f"\nnoise at {at} (replays of {args.duration} s at {args.qps:g} QPS, Poisson; simulated):")
    records = [trial_records(t) for t in same]
    by_seq: dict = {}
    for recs in records:
        for r in recs:
            if r["ok"]:
                by_seq.setdefault(r["seq"], []).append(float(r["e2e_s"]))
    jitter = sorted(max(v) - min(v) for v in by_seq.values() if len(v) == len(records))
    print(
        f"  1. one schedule (seed {args.seed}) x{args.noise}: P99 {fmt([t['value'] for t in same])}, spread "
        f"{spread([t['value'] for t in same])}; {len(records[0])} requests a replay, each request's e2e differs "
        f"between the replays by median {jitter[len(jitter) // 2] * 1000:.0f} ms, at most {jitter[-1] * 1000:.0f} ms; "
        f"client send lag {send_lag([r for recs in records for r in recs])}"
    )
    print(
        f"  2. schedules {args.seed}..{args.seed + args.noise - 1}: P99 {fmt(many['p99s'])}, "
        f"spread {spread(many['p99s'])}"
    )
    pooled = [pooled_p99(trial_records(t)) for t in trials]
    medians = [statistics.median(t["p99s"]) for t in trials]
    print(
        f"  3. as a trial ({args.repeats} schedules) x{args.noise}: pooled P99 {fmt(pooled)}, spread {spread(pooled)}; "
        f"median of P99s {fmt(medians)}, spread {spread(medians)}"
    )


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
    parser.add_argument("--seeds", default="0,1,2", help="one grid, TPE study and verdict per seed")
    parser.add_argument("--repeats", type=int, default=3, help="replays per trial, seeds s..s+k-1")
    parser.add_argument(
        "--p99", choices=("pooled", "median"), default="pooled", help="the trial's P99 over its repeats (repeats_p99)"
    )
    parser.add_argument("--tpe-budget", type=int, default=0, help="TPE trials (default: the grid's size)")
    parser.add_argument("--max-confirm", type=int, default=4, help="TPE points confirmed at most per seed")
    parser.add_argument("--noise", type=int, default=0, help="only measure one point's noise, this many replays")
    parser.add_argument("--noise-point", default="16,32", help="max_num_seqs,max_num_batched_tokens for --noise")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # progress shows as it comes, also when written to a file
    args.seqs = [int(v) for v in args.seqs.split(",")]
    args.tokens = [int(v) for v in args.tokens.split(",")]
    args.seeds = [int(v) for v in args.seeds.split(",")]
    args.seed = args.seeds[0]
    grid_size = len(args.seqs) * len(args.tokens)
    tpe_budget = args.tpe_budget or grid_size

    prepare_database()
    import django

    django.setup()
    print(
        "Tuning bench (SIMULATED: one agent on the vLLM-protocol simulator, not vLLM; no figure here is a vLLM "
        f"measurement): grid {args.seqs} x {args.tokens} = {grid_size} points; each trial replays {args.duration} s "
        f"at {args.qps:g} QPS (Poisson) {args.repeats} times on seeds s..s+{args.repeats - 1}, the same schedules for "
        f"every trial and confirmation of a seed, and scores the {args.p99} P99; errors <= 0.5 %; TPE budget "
        f"{tpe_budget}; seeds {args.seeds}"
    )
    processes = ()
    with tempfile.TemporaryDirectory(prefix="bench-tuning-") as tmp:
        from django.test import override_settings

        with override_settings(CONVERSATION_LOG_DIR=Path(tmp) / "logs"):
            try:
                w = world(Path(tmp))
                processes = w["processes"]
                if args.noise:
                    noise(w, tuple(int(v) for v in args.noise_point.split(",")), args)
                    return
                shares = {}
                for seed in args.seeds:
                    print(f"\n===== seed {seed} =====")
                    grid = run_study(w, sampler="grid", budget=grid_size, args=args, seed=seed)
                    tpe = run_study(w, sampler="tpe", budget=tpe_budget, args=args, seed=seed)
                    shares[seed] = verdict(w, grid, tpe, grid_size, seed, args)
                overall(shares, grid_size)
            finally:
                for process in processes:
                    process.stop()


def verdict(w, grid: list[dict], tpe: list[dict], grid_size: int, seed: int, args) -> float | None:
    """Confirm the grid's best point and TPE's claims on the same schedules, then decide on confirmed values only.
    Returns the share of the grid's trials TPE needed (None: not reached)."""
    if not feasible(grid):
        print("\nno feasible grid point: widen the ranges or lower --qps")
        return None
    best = min(feasible(grid), key=lambda t: t["value"])
    print(f"\ngrid's best as measured: {best['value']:.3f} s at {point(best)} (trial {best['number']})")
    # The bar comes from the grid's best point measured again, not from its first pass: the lowest of 16 noisy first
    # readings is likely a low draw, and a bar set by it is one no other point's reading comes within (seed 0 on
    # 2026-12-01: 0.892 s first pass, 1.088 s confirmed; TPE's readings of (16, 64) at ~1.0 s never counted).
    first = confirm(w, point(best), seed, args)
    if first["value"] is None:
        print("the grid's best point missed the constraints when confirmed: no verdict")
        return None
    base, replays = first["value"], list(first["values"])
    if not best["value"] / 1.5 <= base <= best["value"] * 1.5:
        # More than 50 % from the first pass: one of the two caught a stall of the machine (seed 2 on 2026-12-01:
        # 0.876 s, then 3.047 s). Once more, and the median of the three readings.
        again = confirm(w, point(best), seed, args)
        readings = [v for v in (best["value"], base, again["value"]) if v is not None]
        base, replays = statistics.median(readings), replays + list(again["values"])
        print(f"its confirmation was {first['value']:.3f} s, measured again: {fmt(readings)}; median {base:.3f} s")
    bar = base * (1 + WITHIN)
    claims = [t for t in feasible(tpe) if t["value"] <= bar]
    raw = claims[0]["number"] if claims else None
    print(
        f"TPE trials claiming <= {bar:.3f} s ({WITHIN:.0%} above its confirmation {base:.3f} s): "
        + (", ".join(f"{t['number']} {point(t)} {t['value']:.3f}" for t in claims) or "none")
    )
    if raw is not None:
        print(f"unconfirmed reading: first claim at trial {raw} = {raw / grid_size:.2f} of the grid's trials")
    # The points to confirm: each claimed point in trial order (or TPE's best if none claims).
    candidates = [point(t) for t in claims]
    if not candidates and feasible(tpe):
        candidates = [point(min(feasible(tpe), key=lambda t: t["value"]))]
    todo = list(dict.fromkeys(c for c in candidates if c != point(best)))
    confirmed = {point(best): {"value": base, "values": replays}}
    for at in todo[: args.max_confirm]:
        confirmed[at] = confirm(w, at, seed, args)
        if confirmed[at]["value"] is not None and confirmed[at]["value"] <= bar:
            break  # later claims come later: they cannot make the verdict earlier
    if len(todo) > args.max_confirm:
        print(f"(only the first {args.max_confirm} of {len(todo)} claimed points confirmed: --max-confirm)")
    print(f"\n{'point':>10} {'confirmed P99 s':>15}  its replays; first-pass trials")
    for at, c in confirmed.items():
        seen = [f"grid {t['number']}: {t['value']:.3f}" for t in grid if point(t) == at and t["value"] is not None]
        seen += [f"TPE {t['number']}: {t['value']:.3f}" for t in tpe if point(t) == at and t["value"] is not None]
        value = f"{c['value']:.3f}" if c["value"] is not None else "infeasible"
        print(f"{at!s:>10} {value:>15}  {fmt(c['values'])}; {', '.join(seen)}")
    print(f"\nbaseline: the grid's best point confirmed at {base:.3f} s; within {WITHIN:.0%}: <= {bar:.3f} s")
    within = {at for at, c in confirmed.items() if c["value"] is not None and c["value"] <= bar}
    reached = next((t["number"] for t in tpe if point(t) in within), None)
    if reached is None:
        print(
            f"VERDICT seed {seed} (simulated): TPE never reached a point confirmed within {WITHIN:.0%} in {len(tpe)} "
            "trials: target (at most half the grid's trials) NOT met"
        )
        return None
    share = reached / grid_size
    print(
        f"VERDICT seed {seed} (simulated): TPE reached a point confirmed within {WITHIN:.0%} at trial {reached} "
        f"{point(tpe[reached - 1])} = {reached}/{grid_size} = {share:.2f} of the grid's trials: target (<= 0.5) "
        + ("met" if share <= 0.5 else "NOT met")
    )
    return share


def overall(shares: dict, grid_size: int) -> None:
    met = [seed for seed, share in shares.items() if share is not None and share <= 0.5]
    each = ", ".join(
        f"seed {seed}: " + (f"{share:.2f}" if share is not None else "not reached") for seed, share in shares.items()
    )
    print(
        f"\nOVERALL (simulated): target (TPE within {WITHIN:.0%} of the grid's best, confirmed, in at most half of the "
        f"grid's {grid_size} trials) met for {len(met)} of {len(shares)} seeds ({each}): "
        + ("met" if len(met) == len(shares) else "NOT met for every seed")
    )


if __name__ == "__main__":
    main()
