"""Events about alerts to browsers on the on-call page (group `alerts`)."""

from django.utils import timezone

from controlplane.alerts import selectors
from controlplane.alerts.models import Alert
from controlplane.lib import realtime


def alerts_changed(*, alert_ids=(), incident_ids=(), notify=(), from_evaluator: bool = False) -> None:
    """One `alerts.changed` event: these alerts, their incidents and the named ones, summarised.

    `from_evaluator`: sent by a pass that just completed, so evaluation runs (its success is recorded after this)."""
    alerts = list(Alert.objects.filter(pk__in=list(alert_ids)).select_related("rule", "rule_version"))
    incidents = sorted({*incident_ids, *(a.group_id for a in alerts if a.group_id)})
    now = timezone.now()
    evaluator = selectors.EVALUATOR_RUNNING if from_evaluator else selectors.evaluator_health(now=now)
    event: realtime.AlertsChanged = {
        "type": "alerts.changed",
        "alerts": [selectors.alert_summary(a, evaluator=evaluator, now=now) for a in alerts],
        "incidents": [selectors.incident_summary(g) for g in selectors.incidents_by_id(incidents)],
        "notify": list(notify),
        "evaluator": {"is_running": evaluator.is_running, "text": evaluator.text},
    }
    realtime.send([realtime.alerts_group()], event)
