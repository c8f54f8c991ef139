"""A pool's suggestions computed without the cache (Postgres): ten minutes of full 1 s pool rows and 50 measured
impact records, as a ratio to reading the same rows' `values` and nothing else (the floor any window figure pays).

The pool's rows look like the simulator's aggregate at 40 QPS on 4 nodes, with batches idle 20 % of the time and a
batch-size distribution, so the batch-idle rule and the record rules all have work to do.
"""

import os
import subprocess
import sys
import time
import timeit
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/controlplane_bench_advice")
os.environ.update(DATABASE_URL=DATABASE_URL, DJANGO_SETTINGS_MODULE="controlplane.settings")
# A benchmark database on Postgres: the settings refuse the embedded key there.
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-key-never-used-in-production")
os.environ.pop("REDIS_URL", None)
sys.path.insert(0, str(ROOT))


def prepare_database() -> None:
    import psycopg

    name = DATABASE_URL.rsplit("/", 1)[1]
    with psycopg.connect(DATABASE_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)


def build():
    from django.utils import timezone

    from controlplane.accounts.models import User
    from controlplane.impact.models import ImpactRecord
    from controlplane.impact.services import impact_record_change
    from controlplane.metrics.models import MetricSample
    from controlplane.metrics.samples import SAMPLE_KEYS
    from controlplane.nodes.services.pools import pool_create, pool_publish
    from controlplane.params.services.templates import template_create, template_version_create

    admin = User.objects.create_user(username="bench", password="x", role="admin")
    template = template_create(actor=admin, name="chat")
    versions = [
        template_version_create(
            actor=admin,
            template=template,
            document={"inference_params": {"batch": {"max_size": size}, "max_tokens": {"whitelist": []}}},
            base_number=i or None,
        )
        for i, size in enumerate([16, 12, 16])
    ]
    pool = pool_create(actor=admin, name="staging", is_production=False)
    pool_publish(actor=admin, pool=pool, version=versions[2], reason="bench")
    for i in range(50):
        record = impact_record_change(kind="publish", pool=pool, actor=admin, version_before=versions[0],
                                      version_after=versions[1])  # fmt: skip
        record.status, record.outcome = "measured", ["improved", "worsened", "no_change"][i % 3]
        record.before = {"qps": {"median": 40.0}}
        record.save()
    now = timezone.now()
    base = dict.fromkeys(SAMPLE_KEYS) | {
        "nodes": 4, "qps": 40.0, "latency_p99_s": 1.2, "batch_idle_ratio": 0.2, "batch_size_mean": 5.0,
        "long_request_share": 0.03, "kv_cache_usage": 0.5, "gpu_util": 0.6, "queue_depth_short": 3,
        "queue_depth_long": 0, "batch_size_hist": {str(s): 10 * s for s in range(1, 17)},
        "length_hist": {"le256": 300, "le512": 80, "le1k": 15, "le2k": 4, "gt2k": 1},
        "intents": {"order_status": 120, "other": 40}, "tiers": {"strict": 80, "normal": 70, "creative": 10},
    }  # fmt: skip
    MetricSample.objects.bulk_create(
        MetricSample(
            scope="pool", name="staging", pool="staging", t=now - timedelta(seconds=i), resolution_s=1, values=base
        )
        for i in range(600)
    )
    ImpactRecord.objects.filter(status="pending").delete()  # the publishes' own records
    pool.refresh_from_db()
    return pool


def main() -> None:
    prepare_database()
    import django

    django.setup()
    from controlplane.advice.selectors import pool_suggestions
    from controlplane.metrics.models import MetricSample

    pool = build()
    found = pool_suggestions(pool=pool, use_cache=False)["suggestions"]

    def read_rows():
        return list(MetricSample.objects.filter(scope="pool", name="staging", resolution_s=1).values_list("values"))

    baseline = min(timeit.repeat(read_rows, number=5, repeat=5)) / 5
    measured = min(timeit.repeat(lambda: pool_suggestions(pool=pool, use_cache=False), number=5, repeat=5)) / 5
    print("suggestions of one pool, uncached: 600 full 1 s pool rows, 50 measured impact records (Postgres)")
    print(
        f"  suggestions {measured * 1e3:7.1f} ms; reading the rows' values alone {baseline * 1e3:7.1f} ms; "
        f"ratio {measured / baseline:.2f}x; {len(found)} suggestions: {', '.join(s['id'] for s in found)}"
    )


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"  ({time.monotonic() - started:.0f} s)")
