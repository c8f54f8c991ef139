"""A replay run's life after it was queued: start (nodes, plan, client key), the end of each share, the run's end.

The start claims the queued run with a conditional UPDATE (several workers are safe), resolves the nodes it sends to,
draws the plan to size the shares, issues the run's own client key for the pool and waits until every node accepts
it. The last share to finish ends the run: final figures, the pool's metrics over the window, the key revoked.
"""

import logging
import math
import time
import urllib.error
import urllib.request

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max, Min
from django.utils import timezone

from controlplane.convlogs.reader import iter_conversations
from controlplane.lib.gateway_addresses import GatewayRefused, gateway_url_checked
from controlplane.nodes.models import EngineNode
from controlplane.nodes.services.client_keys import client_key_create, client_key_revoke
from controlplane.replays import plan as planning
from controlplane.replays.models import ReplayRequest, ReplayRun
from controlplane.replays.pool_metrics import pool_window_metrics
from controlplane.replays.realtime import replay_progress

logger = logging.getLogger(__name__)

# Shares start together this long after the start task is done, so a worker that picks its share up late still
# meets the first due times.
SCHEDULE_LEAD_S = 1.0


class StartFailed(Exception):
    """The run cannot start; the message says why, naming the field or nodes."""


def spec_of(run: ReplayRun) -> planning.Spec:
    return planning.Spec(
        selection=run.selection,
        sample_size=run.sample_size,
        sample_seed=run.sample_seed,
        top_n=run.top_n,
        pacing=run.pacing,
        qps=run.qps,
        qps_steps=tuple(run.qps_steps or ()),
        step_s=run.step_s,
        arrival=run.arrival,
        time_scale=run.time_scale,
        turn_gap_s=run.turn_gap_s,
        duration_cap_s=run.duration_cap_s,
        seed=run.seed,
        max_requests=settings.REPLAY_MAX_REQUESTS,
    )


def conversations_of(run: ReplayRun):
    """The run's log, streamed conversation by conversation (the conversation-log app's reader)."""
    return iter_conversations(run.log)


def run_plan(run: ReplayRun) -> list[planning.Planned]:
    return planning.plan(conversations_of(run), spec_of(run))


def serving_targets(run: ReplayRun, *, now=None) -> list[dict]:
    """The nodes the run sends to, each serving (online, with a gateway address the control plane may send to, checked
    again now and its host name resolved); chosen ones must all serve."""
    now = now or timezone.now()
    nodes = EngineNode.objects.filter(pool_id=run.pool_id).order_by("name")
    if run.nodes:
        nodes = nodes.filter(name__in=run.nodes)
    targets, idle, refused = [], [], []
    for node in nodes:
        if node.status(now) != EngineNode.Status.ONLINE or not node.gateway_url:
            idle.append(f"{node.name} ({node.status(now)})")
            continue
        try:
            url = gateway_url_checked(node.gateway_url, agent_address=node.agent_address, resolve=True)
        except GatewayRefused as exc:
            refused.append(f"{node.name} ({exc})")
            continue
        targets.append({"name": node.name, "url": url, "model": node.served_model_name, "agent": node.agent_address})
    if run.nodes and (idle or refused):
        raise StartFailed(f"nodes: not serving: {', '.join(idle + refused)}")
    if run.nodes and len(targets) != len(run.nodes):
        raise StartFailed(f"nodes: no longer in pool {run.pool.name}")
    if not targets:
        because = f"; refused: {', '.join(refused)}" if refused else ""
        raise StartFailed(f"pool: no node of {run.pool.name} is online with a gateway address{because}")
    return targets


def targets_checked(targets: list[dict]) -> None:
    """Check the run's stored targets once more before sending to them; StartFailed naming the node if one fails."""
    for target in targets:
        try:
            gateway_url_checked(target["url"], agent_address=target.get("agent"), resolve=True)
        except GatewayRefused as exc:
            raise StartFailed(f"nodes: {target['name']}: {exc}") from None


def replay_start(run_id: int) -> list[tuple[int, int, str]]:
    """Start a queued run; returns the shares to hand out as (run id, index, client key). Nothing for a run that is
    gone, already claimed, or cancelled meanwhile; a run that cannot start ends failed with the reason."""
    claimed = ReplayRun.objects.filter(pk=run_id, status=ReplayRun.Status.QUEUED).update(
        status=ReplayRun.Status.RUNNING, started_at=timezone.now()
    )
    if not claimed:
        return []
    run = ReplayRun.objects.select_related("pool__desired_version", "created_by").get(pk=run_id)
    key = None
    try:
        if run.pool.is_production and not run.production_override_reason:
            # Queued against a pool that was not production then: the override the pool now needs was never given.
            raise StartFailed(
                f"pool: {run.pool.name} became a production pool after this replay was queued; replays run against "
                "non-production pools (an SRE or admin may queue a new one with production_override_reason)"
            )
        targets = serving_targets(run)
        planned = run_plan(run)
        if not planned:
            raise StartFailed("log: the selection has no user message to replay")
        peak = max(planning._per_second(planned).values())
        if peak > settings.REPLAY_MAX_QPS:
            raise StartFailed(
                f"time_scale: the log's pace at this scale peaks at {peak} requests in one second; "
                f"replays send at most {settings.REPLAY_MAX_QPS} per second"
            )
        shares = planning.shares_for(
            planned, per_share_qps=settings.REPLAY_SHARE_QPS, max_shares=settings.REPLAY_MAX_SHARES
        )
        client_key, key = client_key_create(actor=run.created_by, name=f"replay-{run.pk}", pools=[run.pool])
        ReplayRun.objects.filter(pk=run.pk).update(client_key=client_key)
        wait_for_key(targets, key, timeout_s=settings.REPLAY_KEY_WAIT_S, cancelled=lambda: _cancelling(run.pk))
        version = run.pool.desired_version
        updated = ReplayRun.objects.filter(pk=run.pk, status=ReplayRun.Status.RUNNING).update(
            targets=targets,
            planned=len(planned),
            shares=shares,
            asked_qps=run.qps if run.arrival == "uniform" and run.qps else planning.mean_rate(planned),
            template_version=version,
            template_hash=version.content_hash if version is not None else "",
            schedule_start=time.time() + SCHEDULE_LEAD_S,
        )
    except StartFailed as exc:
        replay_fail(run.pk, str(exc))
        return []
    except Exception as exc:
        logger.exception("replay %s: start failed", run.pk)
        replay_fail(run.pk, f"start failed: {type(exc).__name__}: {exc}")
        return []
    if not updated:  # cancelled while it waited for the key: end it here, no share was handed out
        ReplayRun.objects.filter(pk=run.pk).update(shares=0)
        replay_finish(run.pk)
        return []
    replay_progress(run.pk)
    return [(run.pk, index, key) for index in range(shares)]


def _cancelling(run_id: int) -> bool:
    return ReplayRun.objects.filter(pk=run_id, status=ReplayRun.Status.CANCELLING).exists()


def wait_for_key(targets: list[dict], key: str, *, timeout_s: float, cancelled) -> None:
    """Until every node's gateway accepts the key (its policy bundle arrived): GET /v1/models answers 200."""
    waiting = {target["name"]: target["url"] for target in targets}
    deadline = time.monotonic() + timeout_s
    while waiting:
        for name, url in list(waiting.items()):
            if _accepts(url, key):
                del waiting[name]
        if not waiting or cancelled():
            return
        if time.monotonic() > deadline:
            raise StartFailed(f"nodes: did not accept the run's client key within {timeout_s} s: {', '.join(waiting)}")
        time.sleep(0.2)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect would carry the run's key to an address nobody checked: it is an answer, not a new request."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def _accepts(url: str, key: str) -> bool:
    request = urllib.request.Request(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"})  # noqa: S310
    try:
        with _OPENER.open(request, timeout=2) as response:  # a gateway URL checked by serving_targets
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def replay_fail(run_id: int, error: str) -> None:
    """End a run that could not start: failed, with the reason; its key (if issued) revoked."""
    ReplayRun.objects.filter(pk=run_id).update(error=error[:2000])
    ReplayRun.objects.filter(pk=run_id).update(shares=0, shares_finished=0)
    replay_finish(run_id)


def share_finished(run_id: int, *, cpu_s: float, error: str = "") -> None:
    """Count one share as done (its CPU, its error); the last one ends the run."""
    with transaction.atomic():
        run = ReplayRun.objects.select_for_update().get(pk=run_id)
        run.shares_finished += 1
        run.generator_cpu_s += cpu_s
        if error:
            run.error = (f"{run.error}\n{error}" if run.error else error)[:2000]
        run.save(update_fields=["shares_finished", "generator_cpu_s", "error"])
        last = run.shares_finished >= run.shares
    if last:
        replay_finish(run_id)


def live_figures(run_id: int) -> dict:
    """Achieved QPS and P99 of the successful requests so far, from the rows written."""
    rows = ReplayRequest.objects.filter(run_id=run_id)
    span = rows.filter(sent_at__isnull=False).aggregate(first=Min("sent_at"), last=Max("sent_at"))
    sent = rows.filter(sent_at__isnull=False).count()
    achieved = None
    if sent >= 2 and span["last"] > span["first"]:
        achieved = (sent - 1) / (span["last"] - span["first"])
    return {"achieved_qps": achieved, "p99_s": quantile(rows.filter(ok=True), "e2e_s", 0.99)}


def quantile(rows, field: str, q: float) -> float | None:
    """The q-quantile of a column (nearest rank), one indexed query however many rows."""
    count = rows.exclude(**{f"{field}__isnull": True}).count()
    if not count:
        return None
    index = max(0, math.ceil(q * count) - 1)
    return rows.exclude(**{f"{field}__isnull": True}).order_by(field).values_list(field, flat=True)[index]


def replay_finish(run_id: int) -> None:
    """End the run: cancelled, failed or succeeded; final figures; the pool's metrics; its client key revoked."""
    run = ReplayRun.objects.select_related("pool", "client_key", "created_by").get(pk=run_id)
    if run.status in ReplayRun.FINISHED and run.finished_at is not None:
        return
    now = timezone.now()
    if run.status == ReplayRun.Status.CANCELLING or run.status == ReplayRun.Status.CANCELLED:
        status = ReplayRun.Status.CANCELLED
    elif run.error:
        status = ReplayRun.Status.FAILED
    else:
        status = ReplayRun.Status.SUCCEEDED
    figures = live_figures(run_id)
    lag = _send_lag_p99(run_id)
    metrics = pool_window_metrics(pool_name=run.pool.name, since=run.started_at or now, until=now)
    ReplayRun.objects.filter(pk=run_id).update(
        status=status, finished_at=now, send_lag_p99_s=lag, pool_metrics=metrics, **figures
    )
    if run.client_key is not None and run.client_key.is_active:
        client_key_revoke(actor=run.created_by, client_key=run.client_key, reason=f"replay {run.pk} ended ({status})")
    replay_progress(run_id)


def _send_lag_p99(run_id: int) -> float | None:
    lags = sorted(
        sent - due
        for sent, due in ReplayRequest.objects.filter(run_id=run_id, sent_at__isnull=False).values_list(
            "sent_at", "scheduled_at"
        )
    )
    return lags[max(0, math.ceil(0.99 * len(lags)) - 1)] if lags else None


def add_progress(run_id: int, *, sent: int, done: int, errors: int) -> str:
    """Add a share's counts since its last report; returns the run's status (a cancel shows here)."""
    if sent or done or errors:
        ReplayRun.objects.filter(pk=run_id).update(
            sent=F("sent") + sent, done=F("done") + done, errors=F("errors") + errors
        )
    return ReplayRun.objects.filter(pk=run_id).values_list("status", flat=True).first() or ReplayRun.Status.CANCELLED


# Past its last due time, a run's shares get the request timeout and this much more to report their end.
REAP_GRACE_S = 60


def replay_runs_reap(*, now: float | None = None) -> list[int]:
    """End runs whose shares never reported their end (a worker stopped or was killed): failed, key revoked.

    A running run is overdue once its schedule's end plus the request timeout plus REAP_GRACE_S has passed; one that
    never got a schedule, once its start has had the key wait plus REAP_GRACE_S twice over."""
    now = time.time() if now is None else now
    overdue = []
    active = ReplayRun.objects.filter(status__in=[ReplayRun.Status.RUNNING, ReplayRun.Status.CANCELLING])
    for run_id, schedule_start, duration, started_at in active.values_list(
        "pk", "schedule_start", "duration_cap_s", "started_at"
    ):
        if schedule_start is not None:
            late = now > schedule_start + duration + settings.REPLAY_REQUEST_TIMEOUT_S + REAP_GRACE_S
        else:
            late = started_at is not None and now > started_at.timestamp() + 2 * (
                settings.REPLAY_KEY_WAIT_S + REAP_GRACE_S
            )
        if late:
            overdue.append(run_id)
    for run_id in overdue:
        ReplayRun.objects.filter(pk=run_id, error="").update(
            error="its shares did not report their end in time (a worker stopped?)"
        )
        replay_finish(run_id)
    return overdue
