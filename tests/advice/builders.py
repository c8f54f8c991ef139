"""Builders for suggestion tests: a template whose versions differ in batch.max_size, a pool running one, pool rows."""

from datetime import timedelta

from django.utils import timezone

from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.metrics.factories import second_rows


def versions_of(actor, sizes: list[int], name: str = "chat"):
    """Template `name` whose version i has batch.max_size sizes[i] (and no whitelists to resolve)."""
    template = template_create(actor=actor, name=name)
    made = []
    for i, size in enumerate(sizes):
        document = {"inference_params": {"batch": {"max_size": size}, "max_tokens": {"whitelist": []}}}
        made.append(
            template_version_create(
                actor=actor, template=template, document=document, base_number=i or None, comment=f"v{i + 1}"
            )
        )
    return template, made


def running(sre, version, name: str = "staging"):
    pool = pool_create(actor=sre, name=name, is_production=False)
    pool_publish(actor=sre, pool=pool, version=version, reason="test")
    pool.refresh_from_db()
    return pool


def window_rows(pool: str, seconds: int = 120, **values):
    """`seconds` 1 s pool rows ending now, each with `values` (two nodes, 10 QPS unless given)."""
    now = timezone.now()
    row = {"nodes": 2, "qps": 10.0, **values}
    second_rows(scope="pool", name=pool, pool=pool, start=now - timedelta(seconds=seconds - 1), values=[row] * seconds)


def steady_rows(pool: str, start, seconds: int, *, p99: float, qps: float = 10.0) -> None:
    """1 s pool rows from `start` with a small deterministic wobble (a spread for the impact records' noise test)."""
    values = []
    for i in range(seconds):
        wobble = 1 + ((i * 7) % 11 - 5) / 250
        values.append(
            {
                "nodes": 2,
                "qps": qps * wobble,
                "latency_p50_s": p99 / 3 * wobble,
                "latency_p99_s": p99 * wobble,
                "latency_p999_s": p99 * 1.2 * wobble,
                "error_rate": 0.0,
                "batch_idle_ratio": 0.1,
            }
        )
    second_rows(scope="pool", name=pool, pool=pool, start=start, values=values)
