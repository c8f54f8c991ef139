"""Incident notifications in Alertmanager's webhook format (version 4), queued as outbox rows and POSTed by a task.

Any receiver written for Alertmanager (PagerDuty bridges, chat bots, ...) takes them unchanged:
https://prometheus.io/docs/alerting/latest/configuration/#webhook_config
"""

import json
import logging
import urllib.error
import urllib.request
from datetime import UTC, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from controlplane.alerts import runbooks, signals
from controlplane.alerts.models import Alert, AlertGroup, AlertNotification

log = logging.getLogger(__name__)

RECEIVER = "controlplane"
# Alertmanager's "not ended yet" value of endsAt.
ZERO_TIME = "0001-01-01T00:00:00Z"
TIMEOUT_S = 5
# A claimed notification whose sender died is taken again after this long.
CLAIM_TIMEOUT_S = 60


class WebhookFailed(Exception):
    """The receiver could not be reached or answered outside 2xx; the task retries."""


def _rfc3339(value) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def alert_labels(alert: Alert) -> dict[str, str]:
    labels = {
        "alertname": alert.rule.name,
        "severity": alert.severity,
        "scope": alert.scope,
        "pool": alert.pool,
        "node": alert.node,
    }
    return {k: v for k, v in labels.items() if v}


def webhook_payload(*, group: AlertGroup, alerts: list[Alert], status: str) -> dict:
    """The message about one incident: its firing (or, once resolved, its last) alerts, as Alertmanager sends it."""
    base = settings.CONTROLPLANE_EXTERNAL_URL
    items = []
    for alert in alerts:
        version = alert.rule_version
        ended = alert.resolved_at if alert.state == Alert.State.RESOLVED else None
        items.append(
            {
                "status": "resolved" if ended else "firing",
                "labels": alert_labels(alert),
                "annotations": {
                    "summary": version.summary,
                    "description": f"{alert.name}: {version.metric} is "
                    f"{signals.format_value(version.metric, alert.value)} ({version.condition_text})",
                    "runbook_url": runbooks.runbook_url(version.runbook),
                },
                "startsAt": _rfc3339(alert.fired_at or alert.started_at),
                "endsAt": _rfc3339(ended) if ended else ZERO_TIME,
                "generatorURL": f"{base}/alert-rules/{alert.rule.name}/",
                "fingerprint": alert.fingerprint,
            }
        )
    group_labels = {"alertname": group.rule.name, **({"pool": group.pool} if group.pool else {})}
    label_sets = [item["labels"] for item in items]
    common_labels = (
        {k: v for k, v in label_sets[0].items() if all(ls.get(k) == v for ls in label_sets)} if label_sets else {}
    )
    annotation_sets = [item["annotations"] for item in items]
    common_annotations = (
        {k: v for k, v in annotation_sets[0].items() if all(a.get(k) == v for a in annotation_sets)}
        if annotation_sets
        else {}
    )
    return {
        "version": "4",
        "groupKey": "{}:{" + ", ".join(f'{k}="{v}"' for k, v in sorted(group_labels.items())) + "}",
        "truncatedAlerts": 0,
        "status": status,
        "receiver": RECEIVER,
        "groupLabels": group_labels,
        "commonLabels": common_labels,
        "commonAnnotations": common_annotations,
        "externalURL": f"{base}/oncall/",
        "alerts": items,
    }


def notification_send(*, notification_id: int) -> bool:
    """POST one queued notification; True when it was delivered (now or before). Raises WebhookFailed to retry.

    The claim is a conditional UPDATE, so two workers never both send it.
    """
    url = settings.ALERT_WEBHOOK_URL
    if not url:
        return False
    now = timezone.now()
    claimed = (
        AlertNotification.objects.filter(pk=notification_id, sent_at__isnull=True)
        .filter(Q(claimed_at__isnull=True) | Q(claimed_at__lt=now - timedelta(seconds=CLAIM_TIMEOUT_S)))
        .update(claimed_at=now)
    )
    if not claimed:
        return AlertNotification.objects.filter(pk=notification_id, sent_at__isnull=False).exists()
    notification = AlertNotification.objects.get(pk=notification_id)
    body = json.dumps(notification.payload).encode("utf-8")
    request = urllib.request.Request(  # noqa: S310 - the operator's configured URL
        url, data=body, headers={"Content-Type": "application/json", "User-Agent": "controlplane-alerts"}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310
            response.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:1000]
        AlertNotification.objects.filter(pk=notification_id).update(
            claimed_at=None, attempts=notification.attempts + 1, last_error=error
        )
        log.warning("alert webhook %s failed (attempt %s): %s", url, notification.attempts + 1, error)
        raise WebhookFailed(error) from exc
    AlertNotification.objects.filter(pk=notification_id).update(
        sent_at=timezone.now(), attempts=notification.attempts + 1, last_error=""
    )
    return True
