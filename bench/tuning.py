"""Automatic tuning against a plain grid: how many trials TPE needs to come within 5 % of the grid's best.

vLLM's auto-tune script sweeps `max_num_seqs` and `max_num_batched_tokens` over a grid; this bench runs that grid as a
tuning study (sampler `grid`, every point once) and then a TPE study over the same two fields, the same replay and the
same budget (the grid's size), both through the product's own path: each trial saves a candidate version, publishes
it to a staging pool, waits for the agent's ACK after the engine's restart (both fields are cold) and replays the
same conversation log at a QPS that stresses the engine.

The node is one real agent on the vLLM-protocol simulator (`engine_node.simulator`, a profile in this file): every
figure printed is **simulated**, not a vLLM measurement. The grid's own best, measured in the same run, is the
baseline. Printed: every trial of both studies (values, P99, error rate, feasible), the grid's best, the first TPE
trial within 5 % of it, and that trial count as a share of the grid (target: at most 0.5).

Run from the repository root with Postgres and Redis on 127.0.0.1 (as `make bench` does):
`.venv/bin/python bench/tuning.py [--duration 3] [--qps 40] [--seqs 2,4,8,16] [--tokens 8,16,32,64] [--seed 0]`.
Each trial's replay lasts `--duration` seconds (the whole bench takes about grid size x 2 x (duration + ~5 s)).
Every process it starts is stopped on exit.
"""

import argparse
import math
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


def run_study(w, *, sampler: str, budget: int, args) -> list[dict]:
    from controlplane.tuning.models import TuningStudy
    from controlplane.tuning.services import study_create

    started = time.monotonic()
    study = study_create(
        actor=w["sre"],
        pool=w["pool"],
        base_version=w["base"],
        log=w["log"],
        space=[
            {"path": "engine.max_num_seqs", "type": "choice", "choices": args.seqs},
            {"path": "engine.max_num_batched_tokens", "type": "choice", "choices": args.tokens},
        ],
        objective="min_p99",
        replay={"qps": args.qps, "duration_s": args.duration, "arrival": "poisson"},
        constraints={"p99_max_s": 30.0, "error_rate_max": 0.005},
        budget=budget,
        sampler=sampler,
        seed=args.seed,
        label=f"bench {sampler}",
        reason="bench: TPE against a plain grid",
    )
    timeout = budget * (args.duration + 60)
    study = wait_until(
        lambda: (s := TuningStudy.objects.get(pk=study.pk)).status in ("succeeded", "failed", "cancelled") and s,
        timeout,
        f"the {sampler} study",
    )
    elapsed = time.monotonic() - started
    trials = list(
        study.trials.order_by("number").values("number", "params", "value", "measured", "is_feasible", "state")
    )
    each = elapsed / max(len(trials), 1)
    print(f"\n{sampler}: {study.status}, {len(trials)} trials in {elapsed:.0f} s ({each:.1f} s each)")
    if study.error:
        print(f"  error: {study.error}")
    print(f"  {'#':>3} {'max_num_seqs':>12} {'batched_tokens':>14} {'P99 s':>8} {'errors':>7} feasible")
    for t in trials:
        m = t["measured"] or {}
        p99 = f"{m['p99_s']:.3f}" if m.get("p99_s") is not None else "—"
        rate = f"{m['error_rate']:.2%}" if m.get("error_rate") is not None else "—"
        print(
            f"  {t['number']:>3} {t['params']['engine.max_num_seqs']:>12} "
            f"{t['params']['engine.max_num_batched_tokens']:>14} {p99:>8} {rate:>7} {t['is_feasible']}"
        )
    return trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=3, help="seconds of replay per trial")
    parser.add_argument("--qps", type=float, default=40.0)
    parser.add_argument("--seqs", default="2,4,8,16", help="max_num_seqs values of the grid")
    parser.add_argument("--tokens", default="8,16,32,64", help="max_num_batched_tokens values of the grid")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.seqs = [int(v) for v in args.seqs.split(",")]
    args.tokens = [int(v) for v in args.tokens.split(",")]
    grid_size = len(args.seqs) * len(args.tokens)

    prepare_database()
    import django

    django.setup()
    print(
        "Tuning bench (simulated: one agent on the vLLM-protocol simulator, not vLLM): "
        f"grid {args.seqs} x {args.tokens} = {grid_size} points; replay {args.duration} s at {args.qps:g} QPS "
        f"(Poisson) per trial; objective min P99 with errors <= 0.5 %; seed {args.seed}"
    )
    processes = ()
    with tempfile.TemporaryDirectory(prefix="bench-tuning-") as tmp:
        from django.test import override_settings

        with override_settings(CONVERSATION_LOG_DIR=Path(tmp) / "logs"):
            try:
                w = world(Path(tmp))
                processes = w["processes"]
                grid = run_study(w, sampler="grid", budget=grid_size, args=args)
                tpe = run_study(w, sampler="tpe", budget=grid_size, args=args)
            finally:
                for process in processes:
                    process.stop()
    feasible = [t["value"] for t in grid if t["is_feasible"] and t["value"] is not None]
    if not feasible:
        print("\nno feasible grid point: widen the ranges or lower --qps")
        return
    best = min(feasible)
    near = best * (1 + WITHIN)
    tpe_best = min((t["value"] for t in tpe if t["is_feasible"] and t["value"] is not None), default=None)
    print(f"\ngrid best P99 (baseline): {best:.3f} s over {len(grid)} trials; within {WITHIN:.0%}: <= {near:.3f} s")
    print(f"TPE best P99: {tpe_best:.3f} s" if tpe_best is not None else "TPE: no feasible trial")
    # (a) TPE's own measurements; (b) the grid's measurement of the point TPE proposed, which takes the run-to-run
    # noise of two replays of the same point out of the comparison.
    own = next((t["number"] for t in tpe if t["is_feasible"] and t["value"] is not None and t["value"] <= near), None)
    table = {point(t): t["value"] for t in grid if t["is_feasible"] and t["value"] is not None}
    lookup = next((t["number"] for t in tpe if table.get(point(t), math.inf) <= near), None)
    for name, reached in (("by its own replays", own), ("by the grid's replay of the point it chose", lookup)):
        if reached is None:
            print(f"TPE {name}: never within {WITHIN:.0%} of the grid's best in {len(tpe)} trials")
        else:
            print(
                f"TPE {name}: within {WITHIN:.0%} at trial {reached}, "
                f"{reached}/{grid_size} = {reached / grid_size:.2f} of the grid's trials (target <= 0.5)"
            )
    same = [(t["number"], t["value"]) for t in tpe if point(t) == min(table, key=table.get)]
    print(f"noise: the grid's best point measured again by TPE: {', '.join(f'{v:.3f}' for _, v in same) or 'never'}")


def point(trial: dict) -> tuple:
    return trial["params"]["engine.max_num_seqs"], trial["params"]["engine.max_num_batched_tokens"]


if __name__ == "__main__":
    main()
