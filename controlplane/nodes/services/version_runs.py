"""The production gate's evidence: which nodes of non-production pools ran which version, healthy, and for how long.

A version has *run* on non-production once a node of a non-production pool ACKed it and then stayed healthy on it
for the pool's `soak_s` (default 300 s). Healthy, checked by every watch pass (every 5 s, and once more when the
version is published to production), means all of:

- the node still runs the version and has applied nothing else since the run started: no other config ACKed, none
  tried and NACKed (`EngineNode.applied_at`, `last_nack_at`: a cold change drains and restarts the engine, and a
  failed one restarts it once more on the old config);
- it is connected and was heard from within NODE_LOST_AFTER_S (not lost), and its engine is not `degraded`
  (crashed, or failed to start); a run starts only while the node reports `online`, and an operation of an SRE
  or a memory cleanup during the run (`draining`, `restarting`, `warming` the same config) does not end it;
- no warmup of it failed since the run started;
- no alert reached critical on the node, or on its pool as a whole, since the run started (node lost, P99 above
  2 s, ...); the alert history is kept, so one that came and went between two passes counts as well.

A run that breaks one of these before its window is over has *failed*, with the reason; once the node is healthy
on the version again a new run starts from that moment. A NACK is recorded as a run that ended at once. A node
already on a version when this was installed counts from its recorded ACK (`applied_at`).
"""

from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.alerts.models import Alert, AlertEvent, Severity
from controlplane.lib.when import clock
from controlplane.nodes.models import EngineNode, VersionRun
from controlplane.params.models import TemplateVersion


def version_runs_watch(*, now: datetime | None = None, version: TemplateVersion | None = None) -> int:
    """One pass (of every run, or of `version`'s only): end, pass or extend the open runs, and open runs for nodes
    found healthy on a version they have none for. Returns how many runs started, passed or ended."""
    now = now or timezone.now()
    with transaction.atomic():
        open_runs = VersionRun.objects.filter(ended_at__isnull=True).select_related("version__template", "pool")
        nodes = EngineNode.objects.filter(pool__is_production=False).select_related("pool", "applied_version__template")
        if version is not None:
            open_runs, nodes = open_runs.filter(version=version), nodes.filter(applied_version=version)
        open_runs = list(open_runs)
        by_id = {node.pk: node for node in nodes}
        # A run's node may have left for another pool (or a production one) meanwhile: it is judged all the same.
        missing = {run.node_id for run in open_runs if run.node_id and run.node_id not in by_id}
        by_id.update({n.pk: n for n in EngineNode.objects.filter(pk__in=missing).select_related("pool")})
        starts = [run.started_at for run in open_runs] + [n.applied_at for n in by_id.values() if n.applied_at]
        alerts = CriticalAlerts(since=min(starts, default=now), pools={n.pool.name for n in by_id.values()})
        changed, healthy = 0, []
        for run in open_runs:
            node = by_id.get(run.node_id) if run.node_id else None
            problem = run_problem(run=run, node=node, since=run.started_at, now=now, alerts=alerts)
            if problem is not None:
                run.ended_at, run.reason = now, problem[:2000]
                if run.state == VersionRun.State.SOAKING:
                    run.state = VersionRun.State.FAILED
                run.save(update_fields=["ended_at", "reason", "state"])
                changed += 1
            elif run.state == VersionRun.State.SOAKING and now >= run.passes_at:
                run.state, run.passed_at, run.healthy_until = VersionRun.State.PASSED, run.passes_at, now
                run.save(update_fields=["state", "passed_at", "healthy_until"])
                changed += 1
            else:
                healthy.append(run.pk)
        if healthy:
            VersionRun.objects.filter(pk__in=healthy).update(healthy_until=now)
        still_open = {(run.node_id, run.version_id) for run in open_runs if run.ended_at is None}
        for node in by_id.values():
            if node.pool.is_production or (node.pk, node.applied_version_id) in still_open:
                continue
            if node.applied_version is not None and _run_start(node=node, now=now, alerts=alerts):
                changed += 1
    return changed


def _run_start(*, node: EngineNode, now: datetime, alerts: "CriticalAlerts") -> VersionRun | None:
    """A run for the version the node is on: from its ACK if nothing was recorded since, else from now; none while
    the node is not healthy on it."""
    version = node.applied_version
    if node.applied_hash != version.content_hash:
        return None
    since = now
    if (
        node.applied_at is not None
        and not VersionRun.objects.filter(node=node, version=version, started_at__gte=node.applied_at)
        .exclude(state=VersionRun.State.NACKED)
        .exists()
    ):
        since = node.applied_at
    run = VersionRun(
        version=version,
        pool=node.pool,
        node=node,
        node_name=node.name,
        started_at=since,
        window_s=node.pool.soak_s,
        healthy_until=now,
    )
    problem = run_problem(run=run, node=node, since=since, now=now, alerts=alerts)
    if problem is not None and since != now:
        # Unhealthy since its ACK: the gate shows that run and why it failed; a new one starts if it is fine now.
        run.state, run.healthy_until, run.ended_at, run.reason = VersionRun.State.FAILED, since, now, problem[:2000]
        _save(run)
        run = VersionRun(**{f: getattr(run, f) for f in ("version", "pool", "node", "node_name", "window_s")})
        run.started_at = run.healthy_until = since = now
        problem = run_problem(run=run, node=node, since=now, now=now, alerts=alerts)
    if problem is not None or node.reported_status != EngineNode.Status.ONLINE:
        return None  # a run starts on a serving node (a rollback's restart and warmup come first)
    if now >= run.passes_at:  # an ACK recorded before the watch ran (or while it was stopped), healthy since
        run.state, run.passed_at = VersionRun.State.PASSED, run.passes_at
    return run if _save(run) else None


def _save(run: VersionRun) -> bool:
    try:
        with transaction.atomic():
            run.save()
    except IntegrityError:  # a concurrent pass (the periodic one, a publish) opened it first
        return False
    return True


def run_problem(*, run: VersionRun, node: EngineNode | None, since: datetime, now: datetime, alerts) -> str | None:
    """Why the node is not (or was not, at some point since `since`) healthy on the run's version; None if it is."""
    version = run.version
    if node is None:
        return "the node was removed"
    if node.pool_id != run.pool_id:
        return f"the node moved to pool {node.pool.name}"
    if node.applied_hash != version.content_hash:
        return f"it moved to {_label(node.applied_version)}"
    if node.applied_at is not None and node.applied_at > since:
        return f"it applied its config again at {clock(node.applied_at)}"
    if node.last_nack_at is not None and node.last_nack_at >= since:
        return f"it tried another config at {clock(node.last_nack_at)} (NACKed: {node.last_nack_error[:300]})"
    if node.is_lost(now):
        seen = f"no heartbeat since {clock(node.last_seen_at)}" if node.last_seen_at else "never connected"
        return f"the node was lost ({seen})"
    if node.reported_status == EngineNode.Status.DEGRADED:
        return "its engine is degraded (crashed or failed to start)"
    if node.warmup_failed_at is not None and node.warmup_failed_at >= since:
        reason = str((node.warmup_progress or {}).get("reason", ""))[:300]
        return f"a warmup failed at {clock(node.warmup_failed_at)}" + (f": {reason}" if reason else "")
    critical = alerts.first(node=node.name, pool=node.pool.name, since=since)
    if critical is not None:
        return critical
    return None


def version_run_nacked(*, node: EngineNode, version: TemplateVersion | None, error: str, now: datetime) -> None:
    """A node of a non-production pool refused `version`: the gate shows the error (the caller holds the node)."""
    if version is None or node.pool.is_production:
        return
    VersionRun.objects.create(
        version=version,
        pool=node.pool,
        node=node,
        node_name=node.name,
        state=VersionRun.State.NACKED,
        started_at=now,
        window_s=node.pool.soak_s,
        healthy_until=now,
        ended_at=now,
        reason=error[:2000],
    )


class CriticalAlerts:
    """Alerts of these pools that were critical at some point since `since`, read in two queries per pass."""

    def __init__(self, *, since: datetime, pools: set[str]):
        kinds = [AlertEvent.Kind.FIRING, AlertEvent.Kind.ESCALATED]
        self.rows: list[tuple[str, str, str, str, datetime, bool]] = [
            (*row, False)
            for row in AlertEvent.objects.filter(
                alert__isnull=False, severity=Severity.CRITICAL, kind__in=kinds, at__gte=since, alert__pool__in=pools
            ).values_list("alert__scope", "alert__name", "alert__pool", "alert__rule__name", "at")
        ]
        self.rows += [
            (*row, True)
            for row in Alert.objects.filter(
                state=Alert.State.FIRING, severity=Severity.CRITICAL, pool__in=pools
            ).values_list("scope", "name", "pool", "rule__name", "fired_at")
        ]

    def first(self, *, node: str, pool: str, since: datetime) -> str | None:
        for scope, name, alert_pool, rule, at, firing in sorted(self.rows, key=lambda row: row[4] or since):
            about = (scope == "node" and name == node) or (scope == "pool" and name == pool == alert_pool)
            if about and (firing or at >= since):
                where = node if scope == "node" else f"pool {pool}"
                return f"critical alert {rule} on {where} at {clock(max(at or since, since))}"
        return None


def _label(version: TemplateVersion | None) -> str:
    return str(version) if version is not None else "another config"
