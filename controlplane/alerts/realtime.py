"""Events about alerts to browsers on the on-call page (group `alerts`)."""

from controlplane.alerts import selectors
from controlplane.alerts.models import Alert
from controlplane.lib import realtime


def alerts_changed(*, alert_ids=(), incident_ids=(), notify=()) -> None:
    """One `alerts.changed` event: these alerts, their incidents and the named ones, summarised."""
    alerts = list(Alert.objects.filter(pk__in=list(alert_ids)).select_related("rule", "rule_version"))
    incidents = sorted({*incident_ids, *(a.group_id for a in alerts if a.group_id)})
    event: realtime.AlertsChanged = {
        "type": "alerts.changed",
        "alerts": [selectors.alert_summary(a) for a in alerts],
        "incidents": [selectors.incident_summary(g) for g in selectors.incidents_by_id(incidents)],
        "notify": list(notify),
    }
    realtime.send([realtime.alerts_group()], event)
