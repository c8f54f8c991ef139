"""What on-call does with alerts: acknowledge an incident, silence alerts for a while, end a silence early."""

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from controlplane.alerts import realtime as alerts_realtime
from controlplane.alerts import selectors
from controlplane.alerts.models import Alert, AlertEvent, AlertGroup, Silence
from controlplane.audit.services import audit_record, mutating_service
from controlplane.lib.errors import Conflict, InvalidField, check_slug, required_text

MAX_SILENCE_MINUTES = 7 * 24 * 60


@mutating_service
def alert_group_acknowledge(*, actor, group: AlertGroup, note: str = "") -> AlertGroup:
    """Say who is on an incident; it keeps firing (and notifying on escalation) until its alerts resolve."""
    note = (note or "").strip()
    if len(note) > 2000:
        raise InvalidField("note", "at most 2000 characters")
    with transaction.atomic():
        locked = AlertGroup.objects.select_for_update().select_related("rule").get(pk=group.pk)
        if locked.state != AlertGroup.State.FIRING:
            raise Conflict("incident: already resolved; nothing to acknowledge")
        before = _ack_fields(locked)
        now = timezone.now()
        locked.acknowledged_at, locked.acknowledged_by, locked.acknowledgement_note = now, actor, note
        locked.save(update_fields=["acknowledged_at", "acknowledged_by", "acknowledgement_note"])
        AlertEvent.objects.create(group=locked, kind=AlertEvent.Kind.ACKNOWLEDGED, at=now, actor=actor, note=note)
        audit_record(
            actor=actor,
            action="alert.acknowledge",
            target=locked,
            before=before,
            after=_ack_fields(locked),
            reason=note,
        )
        transaction.on_commit(lambda: alerts_realtime.alerts_changed(incident_ids=[locked.pk]))
    return locked


def _ack_fields(group: AlertGroup) -> dict:
    return {
        "acknowledged_by": group.acknowledged_by.get_username() if group.acknowledged_by else None,
        "acknowledged_at": group.acknowledged_at.isoformat() if group.acknowledged_at else None,
        "note": group.acknowledgement_note,
    }


@mutating_service
def silence_create(
    *, actor, reason: str, duration_minutes: int, rule: str = "", pool: str = "", node: str = ""
) -> Silence:
    """Silence alerts matching every given matcher (rule, pool, node) for `duration_minutes`; they still show."""
    reason = required_text("reason", reason)
    matchers = {"rule": (rule or "").strip(), "pool": (pool or "").strip(), "node": (node or "").strip()}
    for field, value in matchers.items():
        if value:
            check_slug(field, value)
    if not any(matchers.values()):
        raise InvalidField("rule", "a silence needs at least one matcher (rule, pool or node)")
    if isinstance(duration_minutes, bool) or not isinstance(duration_minutes, int):
        raise InvalidField("duration_minutes", "must be a whole number of minutes")
    if not 1 <= duration_minutes <= MAX_SILENCE_MINUTES:
        raise InvalidField("duration_minutes", f"must be between 1 and {MAX_SILENCE_MINUTES} (7 days)")
    now = timezone.now()
    with transaction.atomic():
        silence = Silence.objects.create(
            **matchers,
            reason=reason,
            starts_at=now,
            ends_at=now + timedelta(minutes=duration_minutes),
            created_by=actor,
        )
        changed = _resilence(now=now)
        audit_record(
            actor=actor,
            action="silence.create",
            target=silence,
            after={**silence.matchers, "ends_at": silence.ends_at.isoformat()},
            reason=reason,
        )
        transaction.on_commit(lambda: alerts_realtime.alerts_changed(alert_ids=changed))
    return silence


@mutating_service
def silence_expire(*, actor, silence: Silence, reason: str) -> Silence:
    """End a silence now; the alerts it covered notify again from the next evaluation pass."""
    reason = required_text("reason", reason)
    now = timezone.now()
    with transaction.atomic():
        locked = Silence.objects.select_for_update().get(pk=silence.pk)
        if not locked.is_active(now):
            raise Conflict("silence: not in effect; nothing to end")
        locked.expired_at, locked.expired_by = now, actor
        locked.save(update_fields=["expired_at", "expired_by"])
        changed = _resilence(now=now)
        audit_record(
            actor=actor,
            action="silence.expire",
            target=locked,
            before={"ends_at": locked.ends_at.isoformat()},
            after={"ends_at": now.isoformat()},
            reason=reason,
        )
        transaction.on_commit(lambda: alerts_realtime.alerts_changed(alert_ids=changed))
    return locked


def _resilence(*, now) -> list[int]:
    """Recompute `is_silenced` of every open alert against the silences in effect; ids of those that changed."""
    silences = list(selectors.active_silences(now=now))
    changed = []
    for alert in Alert.objects.exclude(state=Alert.State.RESOLVED).select_related("rule"):
        silenced = selectors.silenced_by(silences, rule=alert.rule.name, pool=alert.pool, node=alert.node)
        if silenced != alert.is_silenced:
            changed.append(alert.pk)
            Alert.objects.filter(pk=alert.pk).update(is_silenced=silenced)
    return changed
