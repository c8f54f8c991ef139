"""One alert evaluation pass with 1, 100 and 500 nodes (Postgres): time and queries, as a ratio to the 1-node pass.

Each node sends a sample every 2 s (the pass period) in which half of the nodes break the P99 warning line and a
tenth the batch-idle one; a twentieth of them are lost. The first passes open the alerts (a storm: every alert
is new), the steady passes that follow mostly find nothing new. Every default rule is enabled. The evaluator
runs in this process with a fake clock, against the real database and the real metric selectors.
"""

import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/controlplane_bench_alerts")
os.environ.update(DATABASE_URL=DATABASE_URL, DJANGO_SETTINGS_MODULE="controlplane.settings")
# A benchmark database on Postgres: the settings refuse the embedded key there.
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-key-never-used-in-production")
os.environ.pop("REDIS_URL", None)  # events go to the in-memory layer: this measures the pass, not Redis
sys.path.insert(0, str(ROOT))
PASSES = 20


def prepare_database() -> None:
    import psycopg

    name = DATABASE_URL.rsplit("/", 1)[1]
    with psycopg.connect(DATABASE_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)


def run(count: int) -> dict:
    from controlplane.alerts.evaluation import evaluate
    from controlplane.alerts.models import Alert, AlertEvent, AlertGroup, NodeRestartTrack
    from controlplane.metrics.models import MetricSample
    from controlplane.metrics.samples import SAMPLE_KEYS
    from controlplane.nodes.models import EngineNode, Pool

    for model in (AlertEvent, Alert, AlertGroup, NodeRestartTrack, MetricSample, EngineNode):
        model.objects.all().delete()
    pools = [Pool.objects.get_or_create(name=f"pool-{i}")[0] for i in range(4)]
    now = datetime.now(UTC).replace(microsecond=0)
    EngineNode.objects.bulk_create(
        EngineNode(
            name=f"gpu-{i:04d}", pool=pools[i % 4], token_hash=f"{i:064x}", is_connected=i % 20 != 0,
            connected_at=now, last_seen_at=now,
        )
        for i in range(count)
    )  # fmt: skip
    base = {key: None for key in SAMPLE_KEYS} | {"batch_size_hist": {}, "length_hist": {}, "intents": {}, "tiers": {}}

    def samples(at: datetime) -> None:
        rows = []
        for i in range(count):
            values = base | {
                "qps": 5.0, "latency_p99_s": 1.8 if i % 2 else 0.6, "batch_idle_ratio": 0.3 if i % 10 == 0 else 0.05,
                "engine_restarts": 0, "queue_depth_short": 0, "queue_depth_long": 0, "degraded": 0,
            }  # fmt: skip
            rows.append(MetricSample(scope="node", name=f"gpu-{i:04d}", pool=f"pool-{i % 4}", t=at, resolution_s=1,
                                     values=values))  # fmt: skip
        rows += [
            MetricSample(scope="pool", name=p.name, pool=p.name, t=at, resolution_s=1, values=base | {"qps": 1.0})
            for p in pools
        ]
        MetricSample.objects.bulk_create(rows)
        EngineNode.objects.filter(is_connected=True).update(last_seen_at=at)

    durations, queries = [], []
    for n in range(PASSES):
        at = now + timedelta(seconds=2 * n)
        samples(at)
        report = evaluate(now=at)
        durations.append(report.duration_ms)
        queries.append(report.queries)
    open_alerts = Alert.objects.exclude(state="resolved").count()
    steady = durations[6:]  # after every P99 alert has fired (10 s)
    return {
        "storm_ms": durations[0],
        "p50_ms": statistics.median(steady),
        "p99_ms": max(steady),
        "queries": max(queries),
        "open_alerts": open_alerts,
    }


def main() -> None:
    prepare_database()
    import django

    django.setup()
    results = {count: run(count) for count in (1, 100, 500)}
    base = results[1]
    print(f"alert evaluation pass, {PASSES} passes each, every default rule enabled (Postgres, this machine)")
    for count, r in results.items():
        print(
            f"  {count:>4} nodes: first pass {r['storm_ms']:7.1f} ms, steady p50 {r['p50_ms']:6.1f} ms "
            f"(x{r['p50_ms'] / base['p50_ms']:.1f} of 1 node), max {r['p99_ms']:6.1f} ms, "
            f"queries {r['queries']} (1 node: {base['queries']}), open alerts {r['open_alerts']}"
        )


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"  ({time.monotonic() - started:.0f} s)")
