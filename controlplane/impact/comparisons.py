"""Replay comparisons as impact records: one per compared run against the baseline, its outcome taken from the
comparison's own verdicts (bootstrap beyond noise, controlplane/replays/noise.py), measured at once."""

import logging

from django.db import transaction
from django.utils import timezone

from controlplane.impact.models import ImpactFieldChange, ImpactRecord
from controlplane.params.diff import params_diff

logger = logging.getLogger(__name__)

P99 = "latency.e2e_s.p99"


def _verdict(row: dict, comparison: dict) -> dict:
    beyond, direction = comparison.get("beyond_noise"), comparison.get("direction")
    if comparison.get("diff") is None:
        verdict = "unknown"
    elif not beyond:
        verdict = "no_change"
    elif direction in ("better", "worse"):
        verdict = "improved" if direction == "better" else "worsened"
    else:
        verdict = "changed"
    return {
        "verdict": verdict,
        "label": row["label"],
        "change": comparison.get("diff"),
        "relative_change": comparison.get("relative"),
        "interval": comparison.get("ci"),
        "p_value": None,
        "better": row["better"],
    }


def outcome(verdicts: dict[str, dict]) -> str:
    """The comparison's verdict: P99 beyond noise, better or worse (a replay sends the same requests at the same
    rate, so its completed-requests-per-second follows the run's last slow replies rather than capacity); the
    other figures decide only when P99 has no value."""
    p99 = verdicts.get(P99, {}).get("verdict", "unknown")
    if p99 in ("improved", "worsened"):
        return p99
    if p99 != "unknown":
        return ImpactRecord.Outcome.NO_CHANGE
    moved = {v["verdict"] for v in verdicts.values()} & {"improved", "worsened"}
    if moved == {"improved", "worsened"}:
        return ImpactRecord.Outcome.MIXED
    return moved.pop() if moved else ImpactRecord.Outcome.NO_CHANGE


def impact_record_comparison(*, comparison, runs: list) -> list[ImpactRecord]:
    """Records of a stored comparison (`runs` in order, the baseline first); logs and returns [] on failure, so the
    comparison itself never fails for its record."""
    try:
        with transaction.atomic():
            return [_record(comparison, runs[0], run, i) for i, run in enumerate(runs[1:])]
    except Exception:
        logger.exception("impact records for replay comparison %s not written", comparison.pk)
        return []


def _record(comparison, base, run, index: int) -> ImpactRecord:
    result = comparison.result
    verdicts = {
        row["key"]: _verdict(row, row["comparisons"][index])
        for row in result["figures"]
        if not row["key"].startswith("intents.")
    }
    before_version, after_version = base.template_version, run.template_version
    figures = {row["key"]: row["values"] for row in result["figures"] if row["key"] in verdicts}
    load = {
        "qps_before": base.achieved_qps,
        "qps_after": run.achieved_qps,
        "qps_ratio": run.achieved_qps / base.achieved_qps if base.achieved_qps and run.achieved_qps else None,
        "asked_qps": [base.asked_qps, run.asked_qps],
        "same_traffic": not comparison.forced_reason,
    }
    if comparison.forced_reason:
        result_outcome = ImpactRecord.Outcome.INCONCLUSIVE
        reason = f"runs of different traffic compared (forced: {comparison.forced_reason})"
    else:
        result_outcome = outcome(verdicts)
        reason = result["verdict"][index] if index < len(result["verdict"]) else ""
    record = ImpactRecord.objects.create(
        kind=ImpactRecord.Kind.REPLAY_COMPARISON,
        pool=run.pool,
        pool_name=run.pool.name,
        template_id=(after_version or before_version).template_id if (after_version or before_version) else None,
        version_before=before_version,
        version_after=after_version,
        subject=f"replay run {run.pk} against baseline run {base.pk} ({comparison})"[:300],
        actor=comparison.created_by,
        actor_name=comparison.created_by.get_username(),
        reason=comparison.label or comparison.forced_reason,
        changed_at=comparison.created_at,
        source={"type": "replay_comparison", "id": comparison.pk, "runs": [base.pk, run.pk]},
        window_before_s=0,
        window_after_s=0,
        status=ImpactRecord.Status.MEASURED,
        measured_at=timezone.now(),
        # The runs' own figures (over requests, not 1 s pool samples): the baseline's and the compared run's.
        before={key: {"median": values[0]} for key, values in figures.items()},
        after={key: {"median": values[index + 1]} for key, values in figures.items()},
        load=load,
        conclusions=verdicts,
        outcome=result_outcome,
        outcome_reason=reason,
    )
    if after_version is not None and before_version is not None and before_version.pk != after_version.pk:
        ImpactFieldChange.objects.bulk_create(
            ImpactFieldChange(record=record, path=c.path, old=c.old, new=c.new, apply=c.apply)
            for c in params_diff(before_version.effective_params, after_version.effective_params)
        )
    return record
