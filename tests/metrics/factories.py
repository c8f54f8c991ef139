"""Rows of metric history written straight to the table, for tests of reads, rollup and retention."""

from datetime import datetime, timedelta

from controlplane.metrics.models import MetricSample


def second_rows(
    *, scope: str, name: str, start: datetime, values: list[dict], pool: str = "", step_s: float = 1.0
) -> list[MetricSample]:
    """One 1 s row per entry of `values`, `step_s` apart from `start`."""
    return MetricSample.objects.bulk_create(
        MetricSample(
            scope=scope, name=name, pool=pool, t=start + timedelta(seconds=i * step_s), resolution_s=1, values=v
        )
        for i, v in enumerate(values)
    )
