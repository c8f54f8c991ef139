"""Writing impact records: the hook every changing service calls, and the measuring of a record's windows.

A record is the knowledge base's own bookkeeping, not a change to the system, so it writes no audit entry (the
change it describes has one). The hook runs inside the change's transaction under a savepoint: the record lands
with the change or not at all, and a failure to write it is logged and never fails the change.
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.impact import conclusions
from controlplane.impact.models import ImpactFieldChange, ImpactRecord
from controlplane.impact.windows import window_samples
from controlplane.params.diff import params_diff

logger = logging.getLogger(__name__)


def impact_record_change(
    *,
    kind: str,
    pool,
    actor,
    actor_name: str = "",
    reason: str = "",
    version_before=None,
    version_after=None,
    subject: str = "",
    source: dict | None = None,
    changed_at: datetime | None = None,
) -> ImpactRecord | None:
    """Record a change to `pool` as a pending impact record; returns None (and logs why) when it cannot.

    `actor` None is the control plane itself, or a user known only by name (`actor_name`). Without `version_after`
    the pool kept its version (`version_before`): the record names it and lists no field changes."""
    try:
        with transaction.atomic():
            return _create(
                kind=kind,
                pool=pool,
                actor=actor,
                actor_name=actor_name,
                reason=reason,
                version_before=version_before,
                version_after=version_after,
                subject=subject,
                source=source or {},
                changed_at=changed_at or timezone.now(),
            )
    except Exception:
        logger.exception("impact record for %s on %s not written", kind, getattr(pool, "name", pool))
        return None


def _create(
    *, kind, pool, actor, actor_name, reason, version_before, version_after, subject, source, changed_at
) -> ImpactRecord:
    version = version_after or version_before
    record = ImpactRecord.objects.create(
        kind=kind,
        pool=pool,
        pool_name=pool.name if pool is not None else "",
        template_id=version.template_id if version is not None else None,
        version_before=version_before,
        version_after=version_after,
        subject=subject[:300],
        actor=actor if actor is not None and actor.pk else None,
        actor_name=actor.get_username() if actor is not None else (actor_name or "system"),
        reason=reason or "",
        changed_at=changed_at,
        source=source,
        window_before_s=settings.IMPACT_WINDOW_BEFORE_S,
        window_after_s=settings.IMPACT_WINDOW_AFTER_S,
        settle_s=settings.IMPACT_SETTLE_S,
    )
    if version_after is not None and (version_before is None or version_before.pk != version_after.pk):
        old = version_before.effective_params if version_before is not None else {}
        ImpactFieldChange.objects.bulk_create(
            ImpactFieldChange(record=record, path=c.path, old=c.old, new=c.new, apply=c.apply)
            for c in params_diff(old, version_after.effective_params)
        )
    return record


def impact_record_measure(*, record_id: int, now: datetime | None = None) -> ImpactRecord | None:
    """Measure a pending record whose after-window has passed: both windows' figures, the load check, a verdict per
    figure and the outcome. A record already measured, not yet due or gone is left as it is."""
    now = now or timezone.now()
    with transaction.atomic():
        record = ImpactRecord.objects.select_for_update(skip_locked=True).filter(pk=record_id).first()
        if record is None or record.status != ImpactRecord.Status.PENDING:
            return record
        if record.after_until > now:
            return record
        _measure(record)
        record.status, record.measured_at = ImpactRecord.Status.MEASURED, now
        record.save()
    return record


def _measure(record: ImpactRecord) -> None:
    at = record.changed_at
    before = window_samples(pool_name=record.pool_name, since=at - timedelta(seconds=record.window_before_s), until=at)
    after = window_samples(pool_name=record.pool_name, since=record.after_since, until=record.after_until)
    record.before = {key: conclusions.summary(before[key]) for key in conclusions.FIGURE_KEYS}
    record.after = {key: conclusions.summary(after[key]) for key in conclusions.FIGURE_KEYS}
    record.load, why_not = conclusions.load_check(
        qps_before=before["qps"],
        qps_after=after["qps"],
        nodes_before=before["nodes"],
        nodes_after=after["nodes"],
        tolerance=settings.IMPACT_LOAD_TOLERANCE_PCT / 100,
        min_samples=settings.IMPACT_MIN_SAMPLES,
    )
    record.conclusions = {
        f.key: conclusions.figure_verdict(f, before[f.key], after[f.key]) for f in conclusions.FIGURES
    }
    # Other changes to the pool inside either window share the credit: named on the record, for the reader to weigh.
    record.load["overlapping"] = list(
        ImpactRecord.objects.filter(
            pool_name=record.pool_name,
            changed_at__gte=at - timedelta(seconds=record.window_before_s),
            changed_at__lt=record.after_until,
        )
        .exclude(pk=record.pk)
        .exclude(kind=ImpactRecord.Kind.REPLAY_COMPARISON)
        .order_by("changed_at")
        .values_list("pk", flat=True)[:20]
    )
    if why_not:
        record.outcome, record.outcome_reason = ImpactRecord.Outcome.INCONCLUSIVE, why_not
    else:
        record.outcome = conclusions.overall_outcome(record.conclusions)
        record.outcome_reason = conclusions.outcome_sentence(
            record.conclusions, record.before, record.after, record.load
        )


def impact_records_measure_due(*, now: datetime | None = None) -> int:
    """Measure every pending record whose after-window has passed; returns how many were measured."""
    now = now or timezone.now()
    measured = 0
    pending = ImpactRecord.objects.filter(status=ImpactRecord.Status.PENDING).values_list(
        "pk", "changed_at", "settle_s", "window_after_s"
    )
    for pk, changed_at, settle_s, window_after_s in pending:
        if changed_at + timedelta(seconds=settle_s + window_after_s) <= now:
            record = impact_record_measure(record_id=pk, now=now)
            measured += record is not None and record.status == ImpactRecord.Status.MEASURED
    return measured
