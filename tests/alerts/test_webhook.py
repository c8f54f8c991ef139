"""The webhook: Alertmanager's payload (version 4) POSTed to a real local HTTP server, off the evaluation path."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from controlplane.alerts import tasks
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import AlertNotification
from controlplane.alerts.notifications import WebhookFailed, notification_send
from tests.engine_node.fleet import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ALERT_KEYS = {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}
TOP_KEYS = {
    "version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels", "commonLabels",
    "commonAnnotations", "externalURL", "alerts",
}  # fmt: skip


class Receiver:
    """A local HTTP server that records every POSTed body; `fail_next` answers 500 that many times first, and every
    request waits for `answer` (a threading.Event) while one is set up."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.fail_next = 0
        self.answer: threading.Event | None = None
        self.received = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.set()
                if receiver.answer is not None:
                    receiver.answer.wait(30)
                if receiver.fail_next:
                    receiver.fail_next -= 1
                    self.send_response(500)
                    self.end_headers()
                    return
                receiver.bodies.append(json.loads(body))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def receiver(settings):
    r = Receiver()
    settings.ALERT_WEBHOOK_URL = r.url
    settings.CONTROLPLANE_EXTERNAL_URL = "https://cp.example.com"
    yield r
    r.close()


def test_firing_and_resolved_messages_have_alertmanagers_shape(receiver, fleet, clock, monkeypatch):
    monkeypatch.setattr(tasks, "BACKOFF_S", 0.05)
    fleet.add("gpu-1")
    fleet.add("gpu-2")
    fleet.disconnect("gpu-1")
    fleet.disconnect("gpu-2")
    evaluate(now=clock.tick(2))
    wait_until(lambda: len(receiver.bodies) == 1, 10, "the firing message")
    firing = receiver.bodies[0]
    assert set(firing) == TOP_KEYS
    assert firing["version"] == "4" and firing["status"] == "firing" and firing["receiver"] == "controlplane"
    assert firing["groupLabels"] == {"alertname": "node-lost", "pool": "prod-main"}
    assert firing["groupKey"] == '{}:{alertname="node-lost", pool="prod-main"}'
    assert firing["commonLabels"] == {
        "alertname": "node-lost", "severity": "critical", "scope": "node", "pool": "prod-main",
    }  # fmt: skip
    assert firing["commonAnnotations"]["runbook_url"] == "https://cp.example.com/runbooks/node-lost/"
    assert firing["externalURL"] == "https://cp.example.com/oncall/"
    assert [a["labels"]["node"] for a in firing["alerts"]] == ["gpu-1", "gpu-2"]
    for alert in firing["alerts"]:
        assert set(alert) == ALERT_KEYS
        assert alert["status"] == "firing" and alert["endsAt"] == "0001-01-01T00:00:00Z"
        assert alert["startsAt"].endswith("Z") and len(alert["fingerprint"]) == 16
        assert alert["generatorURL"] == "https://cp.example.com/alert-rules/node-lost/"
        assert "node_lost" in alert["annotations"]["description"]

    fleet.connect("gpu-1", at=clock.tick(2))
    fleet.connect("gpu-2", at=clock.now)
    evaluate(now=clock.now)
    wait_until(lambda: len(receiver.bodies) == 2, 10, "the resolved message")
    resolved = receiver.bodies[1]
    assert resolved["status"] == "resolved"
    assert {a["status"] for a in resolved["alerts"]} == {"resolved"}
    assert all(a["endsAt"] != "0001-01-01T00:00:00Z" for a in resolved["alerts"])
    assert [a["fingerprint"] for a in resolved["alerts"]] == [a["fingerprint"] for a in firing["alerts"]]
    wait_until(lambda: AlertNotification.objects.filter(sent_at__isnull=False).count() == 2, 5, "sent marks")


def test_a_failing_receiver_is_retried_and_a_slow_one_does_not_hold_up_evaluation(receiver, fleet, clock, monkeypatch):
    monkeypatch.setattr(tasks, "BACKOFF_S", 0.05)
    receiver.fail_next = 2
    receiver.answer = threading.Event()
    fleet.add("gpu-1")
    fleet.disconnect("gpu-1")
    report = evaluate(now=clock.tick(2))
    # The pass is back while the receiver has not answered the first POST (or not even received it yet): by
    # order, not by a stopwatch.
    assert report.notifications == 1
    wait_until(receiver.received.is_set, 10, "the first POST")
    assert not receiver.bodies and AlertNotification.objects.get().sent_at is None
    receiver.answer.set()
    wait_until(lambda: len(receiver.bodies) == 1, 15, "delivery after two failures")
    notification = AlertNotification.objects.get()
    wait_until(lambda: AlertNotification.objects.get().sent_at is not None, 5, "the sent mark")
    notification.refresh_from_db()
    assert notification.attempts == 3 and notification.last_error == ""


def test_a_delivered_message_is_never_sent_twice(receiver, fleet, clock):
    fleet.add("gpu-1")
    fleet.disconnect("gpu-1")
    evaluate(now=clock.tick(2))
    wait_until(lambda: AlertNotification.objects.filter(sent_at__isnull=False).exists(), 10, "the delivery")
    notification = AlertNotification.objects.get()
    assert notification_send(notification_id=notification.pk) is True  # a second worker finds it sent
    assert len(receiver.bodies) == 1 and notification.attempts == 1


def test_an_unreachable_receiver_is_retried_then_given_up_with_the_error_kept(settings, fleet, clock, monkeypatch):
    monkeypatch.setattr(tasks, "BACKOFF_S", 0.01)
    settings.ALERT_WEBHOOK_URL = "http://127.0.0.1:9/closed"
    fleet.add("gpu-1")
    fleet.disconnect("gpu-1")
    evaluate(now=clock.tick(2))
    attempts = tasks.MAX_RETRIES + 1
    wait_until(lambda: AlertNotification.objects.get().attempts == attempts, 15, f"{attempts} attempts")
    notification = AlertNotification.objects.get()
    assert "Connection refused" in notification.last_error
    assert notification.claimed_at is None and notification.sent_at is None
    with pytest.raises(WebhookFailed):  # what makes the Celery task retry (autoretry_for)
        notification_send(notification_id=notification.pk)


def test_without_a_webhook_url_nothing_is_queued(settings, fleet, clock):
    settings.ALERT_WEBHOOK_URL = ""
    fleet.add("gpu-1")
    fleet.disconnect("gpu-1")
    report = evaluate(now=clock.tick(2))
    assert report.notifications == 0 and not AlertNotification.objects.exists()
    assert report.incidents_notified  # browsers on the on-call page still hear of it
