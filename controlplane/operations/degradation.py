"""Pool degradation: an SRE's switch, and the automatic path that follows the pool's load with hysteresis.

While a pool is degraded its gateways give every request the template's `degradation.temperature` and cap
`max_tokens` at `degradation.max_tokens` (hot: the policy bundle reaches every agent within a second of the
commit), and, where the template says so, run without speculative decoding. That part is cold: the control
plane queues a restart command for every node of the pool and sends them one at a time, each after the
previous node finished (`_dispatch_restarts`, run on every transition and by every evaluation pass), so the
pool never loses more than one node's capacity; the agent computes its engine flags from its config and the
bundle's `speculative_decoding` and restarts drained.

The automatic path (`degradation_evaluate`, every second from the beat schedule):
- a pool's load is the highest, over its deployed nodes, of KV-cache usage, queue saturation (each queue's
  depth over its limit in the pool's desired version) and GPU utilisation, from each node's newest sample;
- a node without a sample in the last `STALE_AFTER_S` counts as saturated (1.0): a node that cannot tell
  its load, or a lost one, is no capacity to rely on;
- it enters when the load has stayed above `degradation.load_threshold` for `enter_after_s`, and leaves when
  it has stayed below `degradation.exit_threshold` for `exit_after_s`; between the two thresholds neither
  clock runs, so a load wobbling around one line never flaps;
- a manual degradation is never lifted automatically: only a person ends what a person started.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from controlplane.audit.services import audit_record, mutating_service
from controlplane.impact import hooks as impact_hooks
from controlplane.lib.errors import Conflict, InvalidField, required_text
from controlplane.metrics import selectors as metrics
from controlplane.metrics.models import MetricSample
from controlplane.nodes import realtime as nodes_realtime
from controlplane.nodes.models import EngineNode, NodeCommand, Pool
from controlplane.nodes.services.speculation import speculation_restarts
from controlplane.operations.models import DegradationEvent, PoolDegradation
from controlplane.operations.policy_bundle import push_policy
from controlplane.operations.selectors import params_of

MAX_REASON_LENGTH = 2000
# A node samples once a second; five missed samples is a node that cannot tell its load (seed: stale = saturated).
STALE_AFTER_S = 5.0
# A restart that never reported its end frees the pool's turn after this long (drain plus a slow engine start).
RESTART_LEASE_S = 600
RESTART_REASON = "speculative decoding follows the pool's degradation (one node at a time)"
_UNFINISHED = [NodeCommand.State.PENDING, NodeCommand.State.RUNNING]


# --- manual switch -----------------------------------------------------------------------------------------


@mutating_service
def degradation_enable(*, actor, pool: Pool, reason: str) -> PoolDegradation:
    """Put the pool in degradation now, by a person's decision; it stays until a person ends it."""
    reason = _reason(reason)
    now = timezone.now()
    with transaction.atomic():
        state = _locked_state(pool)
        if state.is_active:
            raise Conflict(f"pool: {pool.name} is already degraded ({state.cause}: {state.reason})")
        _enter(state, cause=PoolDegradation.Cause.MANUAL, reason=reason, actor=actor, now=now)
    return state


@mutating_service
def degradation_disable(*, actor, pool: Pool, reason: str) -> PoolDegradation:
    """End the pool's degradation now, whatever started it.

    The automatic clocks start again from zero, so a load still above the line degrades the pool again only
    after a full `enter_after_s`, not at the next pass.
    """
    reason = _reason(reason)
    now = timezone.now()
    with transaction.atomic():
        state = _locked_state(pool)
        if not state.is_active:
            raise Conflict(f"pool: {pool.name} is not degraded")
        state.load_above_since = state.load_below_since = None
        _leave(state, cause=PoolDegradation.Cause.MANUAL, reason=reason, actor=actor, now=now)
    return state


# --- automatic path ----------------------------------------------------------------------------------------


@dataclass
class PoolLoad:
    """One pool's load figure in a pass, with the node and signal it came from (for the event's reason)."""

    value: float
    node: str
    signal: str


def pool_loads(*, now: datetime) -> dict[int, PoolLoad]:
    """pool id -> its load now, for every pool with a deployed node (one that has a token and ever connected)."""
    latest = metrics.latest_values(scope=MetricSample.Scope.NODE, max_age_s=STALE_AFTER_S, now=now)
    pools = {p.pk: p for p in Pool.objects.select_related("desired_version")}
    loads: dict[int, PoolLoad] = {}
    nodes = EngineNode.objects.exclude(token_hash="").filter(connected_at__isnull=False)
    for name, pool_id in nodes.values_list("name", "pool_id"):
        load = node_load(latest.get(name), params_of(pools[pool_id]), node=name)
        if pool_id not in loads or load.value > loads[pool_id].value:
            loads[pool_id] = load
    return loads


def node_load(values: dict | None, params: dict, *, node: str) -> PoolLoad:
    """The highest of a node's KV-cache usage, queue saturation and SM activity; no fresh sample is 1.0.

    NVML's GPU utilisation (`gpu_util`) is not load: it is the share of time any kernel ran, near 1.0 on a GPU that
    decodes one sequence at a time, so it would degrade an idle-looking pool. SM activity (DCGM, `sm_util`) is the
    share of SMs busy, which grows with the batch; where no DCGM exporter runs the load is KV cache and queues."""
    if values is None:
        return PoolLoad(1.0, node, "no fresh sample")
    batch = params["batch"]
    figures = {
        "kv_cache_usage": _number(values.get("kv_cache_usage")),
        "sm_util": _number(values.get("sm_util")),
        "queue_depth_short": _ratio(values.get("queue_depth_short"), batch["max_queue"]),
        "queue_depth_long": _ratio(values.get("queue_depth_long"), batch["long_context_max_queue"]),
    }
    signal, value = max(figures.items(), key=lambda item: item[1])
    return PoolLoad(min(value, 1.0), node, signal)


def degradation_evaluate(*, now: datetime | None = None) -> list[DegradationEvent]:
    """One pass of the automatic path over every pool; returns the transitions it made."""
    now = now or timezone.now()
    loads = pool_loads(now=now)
    events = []
    for pool in Pool.objects.select_related("desired_version").order_by("name"):
        with transaction.atomic():
            state = _locked_state(pool)
            event = _step(state, loads.get(pool.pk), params_of(state.pool)["degradation"], now)
            if event is not None:
                events.append(event)
            _dispatch_restarts(state.pool, now)
    return events


def _step(state: PoolDegradation, load: PoolLoad | None, params: dict, now: datetime) -> DegradationEvent | None:
    """Move the hysteresis clocks by one reading and enter or leave when one has run long enough."""
    before = (state.load, state.load_above_since, state.load_below_since)
    if load is None:
        # No deployed node: nothing to measure and nothing to degrade.
        state.load, state.load_above_since, state.load_below_since = None, None, None
    else:
        state.load, state.load_at = load.value, now
        if load.value > params["load_threshold"]:
            state.load_above_since, state.load_below_since = state.load_above_since or now, None
        elif load.value < params["exit_threshold"]:
            state.load_above_since, state.load_below_since = None, state.load_below_since or now
        else:
            state.load_above_since = state.load_below_since = None
    event = None
    if load is not None and not state.is_active and state.load_above_since is not None:
        held = (now - state.load_above_since).total_seconds()
        if held >= params["enter_after_s"]:
            reason = (
                f"load {load.value:.2f} ({load.signal} on {load.node}) above {params['load_threshold']:g} "
                f"for {held:.0f} s"
            )
            event = _enter(state, cause=PoolDegradation.Cause.AUTOMATIC, reason=reason, actor=None, now=now)
    elif (
        load is not None
        and state.is_active
        and state.cause == PoolDegradation.Cause.AUTOMATIC
        and state.load_below_since is not None
    ):
        held = (now - state.load_below_since).total_seconds()
        if held >= params["exit_after_s"]:
            reason = f"load {load.value:.2f} below {params['exit_threshold']:g} for {held:.0f} s"
            event = _leave(state, cause=PoolDegradation.Cause.AUTOMATIC, reason=reason, actor=None, now=now)
    if event is None and (state.load, state.load_above_since, state.load_below_since) != before:
        state.save(update_fields=["load", "load_at", "load_above_since", "load_below_since"])
    return event


# --- transitions -------------------------------------------------------------------------------------------


def _locked_state(pool: Pool) -> PoolDegradation:
    """The pool's row, locked; created on first use (the pool row's lock serialises the creation)."""
    # A fresh pool row: the caller's copy may predate a publish, and the desired version decides the restarts.
    locked = Pool.objects.select_for_update(of=("self",)).select_related("desired_version").get(pk=pool.pk)
    state, _ = PoolDegradation.objects.select_for_update().get_or_create(pool=locked)
    state.pool = locked
    return state


def _enter(state: PoolDegradation, *, cause: str, reason: str, actor, now: datetime) -> DegradationEvent:
    before = state.snapshot()
    state.is_active, state.cause, state.reason, state.since, state.changed_by = True, cause, reason, now, actor
    return _record(state, DegradationEvent.Kind.ENTERED, before=before, actor=actor, now=now)


def _leave(state: PoolDegradation, *, cause: str, reason: str, actor, now: datetime) -> DegradationEvent:
    before = state.snapshot()
    state.is_active, state.cause, state.reason, state.since, state.changed_by = False, cause, reason, now, actor
    return _record(state, DegradationEvent.Kind.LEFT, before=before, actor=actor, now=now)


def _record(state: PoolDegradation, kind: str, *, before: dict, actor, now: datetime) -> DegradationEvent:
    """Save the state, its event and audit entry; after commit push the bundle and queue the cold restarts."""
    state.save()
    pool = state.pool
    event = DegradationEvent.objects.create(
        pool=pool, kind=kind, cause=state.cause, reason=state.reason, load=state.load, actor=actor, at=now
    )
    action = "pool.degrade" if kind == DegradationEvent.Kind.ENTERED else "pool.degrade_end"
    audit_record(actor=actor, action=action, target=pool, before=before, after=state.snapshot(), reason=state.reason)
    impact_hooks.degradation(
        pool=pool,
        entered=kind == DegradationEvent.Kind.ENTERED,
        actor=actor,
        reason=state.reason,
        cause=state.cause,
        event_id=event.pk,
        at=now,
    )
    transaction.on_commit(lambda: push_policy([pool]))
    params = params_of(pool)
    if params["speculative"]["enabled"] and not params["degradation"]["speculative_decoding"]:
        _queue_restarts(pool, now)
    return event


def _queue_restarts(pool: Pool, now: datetime) -> None:
    """A restart command for every connected node of the pool not already waiting for one; sent one at a time."""
    waiting = set(
        NodeCommand.objects.filter(
            node__pool=pool, op=NodeCommand.Op.RESTART, state__in=_UNFINISHED, sent_at__isnull=True
        ).values_list("node_id", flat=True)
    )
    for node in EngineNode.objects.filter(pool=pool).exclude(token_hash="").order_by("name"):
        if node.pk not in waiting and not node.is_lost(now):
            NodeCommand.objects.create(node=node, op=NodeCommand.Op.RESTART, requested_by=None, reason=RESTART_REASON)
    _dispatch_restarts(pool, now)


def _dispatch_restarts(pool: Pool, now: datetime) -> None:
    """Send the pool's oldest waiting degradation restart unless a restart of the pool is under way (pool locked)."""
    restarts = NodeCommand.objects.select_related("node").filter(
        node__pool=pool, op=NodeCommand.Op.RESTART, finished_at__isnull=True
    )
    for command in restarts.filter(sent_at__isnull=False):
        if command.node.is_lost(now) or command.sent_at < now - timedelta(seconds=RESTART_LEASE_S):
            command.state, command.finished_at = NodeCommand.State.FAILED, now
            command.result = "turn ended: the node was lost or never reported the end of its restart"
            command.save(update_fields=["state", "result", "finished_at"])
        else:
            return
    if speculation_restarts(pool).filter(sent_at__isnull=False).exists():
        return  # a node restarts for its speculative-decoding rule: the next one waits for it
    for command in restarts.filter(sent_at__isnull=True, reason=RESTART_REASON).order_by("requested_at", "id"):
        if command.node.is_lost(now):
            command.state, command.finished_at = NodeCommand.State.FAILED, now
            command.result = "not sent: the node was not connected when its turn came"
            command.save(update_fields=["state", "result", "finished_at"])
            continue
        command.sent_at = timezone.now()  # under the pool's lock: `now` may predate the previous restart's end
        command.save(update_fields=["sent_at"])
        transaction.on_commit(lambda command=command: nodes_realtime.node_command(command))
        transaction.on_commit(lambda command=command: nodes_realtime.node_command_changed(command))
        return


def _reason(value) -> str:
    reason = required_text("reason", value)
    if len(reason) > MAX_REASON_LENGTH:
        raise InvalidField("reason", f"must be at most {MAX_REASON_LENGTH} characters, got {len(reason)}")
    return reason


def _number(value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value)


def _ratio(depth, limit) -> float:
    return _number(depth) / limit if limit else 0.0
