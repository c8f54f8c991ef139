"""Reads of tuning studies: the list (filters) and one study with its trials."""

from django.db.models import Prefetch

from controlplane.tuning.models import TuningStudy, TuningTrial


def studies(*, pool: str | None = None, status: str | None = None):
    rows = TuningStudy.objects.select_related(
        "pool",
        "log",
        "created_by",
        "cancelled_by",
        "base_version__template",
        "pool_version_before__template",
        "best_trial__version__template",
    )
    if pool:
        rows = rows.filter(pool__name=pool)
    if status:
        rows = rows.filter(status=status)
    return rows


def study_with_trials():
    return studies().prefetch_related(
        Prefetch("trials", queryset=TuningTrial.objects.select_related("version__template").order_by("number"))
    )
