"""The on-call page in Chromium: an incident the evaluator raises appears without a reload, is acknowledged and
silenced through the page (both audited), notifies the browser, and moves to "resolved" live."""

import threading

import pytest
from django.db import connection
from django.utils import timezone

from controlplane.accounts.models import User
from controlplane.alerts.defaults import DEFAULT_RULES
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import AlertGroup, Silence
from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from tests.browser.sessions import open_signed_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Records what the page hands to the Notification API (headless Chromium shows nothing on screen).
RECORD_NOTIFICATIONS = """
window.__notifications = [];
const Original = window.Notification;
window.Notification = function (title, options) {
  window.__notifications.push({title: title, body: options && options.body});
  return new Original(title, options);
};
window.Notification.requestPermission = (...args) => Original.requestPermission(...args);
Object.defineProperty(window.Notification, "permission", {get: () => Original.permission});
"""


def off_thread(work):
    """Run ORM work that sends Channels events in another thread: Playwright's loop runs in this one."""
    errors = []

    def run():
        try:
            work()
        except Exception as exc:  # re-raised below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def set_connected(name: str, connected: bool) -> None:
    now = timezone.now()
    EngineNode.objects.filter(name=name).update(is_connected=connected, last_seen_at=now, connected_at=now)


def test_incident_appears_live_is_acknowledged_silenced_and_resolves(seeded, server_url, new_page, shot):
    def register():
        node_create(actor=User.objects.get(username="sre"), name="gpu-b1", pool=Pool.objects.get(name="prod-main"))
        set_connected("gpu-b1", True)
        evaluate()

    off_thread(register)
    page = new_page()
    page.context.grant_permissions(["notifications"], origin=server_url)
    page.add_init_script(RECORD_NOTIFICATIONS)
    open_signed_in(page, server_url, "oncall", "/oncall/")
    page.locator("#live-state.on").wait_for()
    assert page.locator("#no-incidents").is_visible()
    assert "granted" in page.inner_text("#notify-state")

    # The node drops off; the evaluator's pass reaches the open page over ws/alerts/.
    off_thread(lambda: (set_connected("gpu-b1", False), evaluate()))
    card = page.locator('[data-testid="incident-node-lost"]')
    card.wait_for(timeout=10_000)
    assert card.locator('[data-field="severity"]').inner_text().lower() == "critical"
    assert "prod-main" in card.locator('[data-field="pool"]').inner_text()
    assert "gpu-b1" in card.locator('[data-field="affected"]').inner_text()
    assert card.locator('[data-field="runbook"]').get_attribute("href") == "/runbooks/node-lost/"
    first = card.locator('[data-field="duration"]').inner_text()
    page.wait_for_function(  # the duration ticks
        'first => document.querySelector(\'[data-testid="incident-node-lost"] [data-field="duration"]\')'
        ".innerText !== first",
        arg=first,
    )
    notes = page.evaluate("window.__notifications")
    assert [n["title"] for n in notes] == ["CRITICAL node-lost in prod-main"]
    # Degrading the pool is an SRE's decision (tests/browser/test_degradation_flow.py): not on on-call's card.
    assert card.locator("form.degrade-form").count() == 0
    shot(page, "30-oncall-incident-live")

    # Acknowledge with a note.
    card.locator("form.ack-form input[name=note]").fill("on it: host is rebooting")
    card.locator("form.ack-form button").click()
    page.wait_for_url(f"{server_url}/oncall/")
    card = page.locator('[data-testid="incident-node-lost"]')
    assert "Acknowledged by oncall: on it: host is rebooting" in card.locator('[data-field="ack-text"]').inner_text()
    group = AlertGroup.objects.get(rule__name="node-lost", state="firing")
    assert group.acknowledged_by.username == "oncall"
    ack = AuditEntry.objects.get(action="alert.acknowledge")
    assert (ack.actor_name, ack.reason) == ("oncall", "on it: host is rebooting")

    # Silence, with the matcher prefilled from the incident.
    silence_form = card.locator("form.silence-form")
    assert silence_form.locator("input[name=rule]").input_value() == "node-lost"
    assert silence_form.locator("input[name=node]").input_value() == "gpu-b1"
    silence_form.locator("select[name=duration_minutes]").select_option("240")
    silence_form.locator("input[name=reason]").fill("hardware swap")
    silence_form.locator("button").click()
    page.wait_for_url(f"{server_url}/oncall/")
    page.locator('[data-testid="silences"] tr[data-silence]').wait_for()
    assert "node=gpu-b1" in page.inner_text('[data-testid="silences"]')
    assert page.locator('[data-testid="incident-node-lost"] [data-field="silenced"]').is_visible()
    silence = Silence.objects.get()
    assert (silence.created_by.username, silence.node, silence.reason) == ("oncall", "gpu-b1", "hardware swap")
    assert AuditEntry.objects.filter(action="silence.create", actor_name="oncall", reason="hardware swap").exists()
    shot(page, "31-oncall-acknowledged-and-silenced")

    # The node comes back: the incident leaves the firing list for the resolved one, without a reload.
    page.locator("#live-state.on").wait_for()
    off_thread(lambda: (set_connected("gpu-b1", True), evaluate()))
    page.locator('[data-testid="incident-node-lost"]').wait_for(state="detached", timeout=10_000)
    page.locator(f'#resolved tr[data-incident="{group.pk}"]').wait_for()
    assert page.locator("#no-incidents").is_visible()
    shot(page, "32-oncall-resolved")
    assert not page.locator("#notify-enable").is_visible()  # permission already granted

    # The rules and runbooks the incident linked to.
    page.goto(f"{server_url}/alert-rules/")
    assert page.locator('[data-testid="alert-rules"] tr[data-rule]').count() == len(DEFAULT_RULES)
    shot(page, "33-alert-rules")
    page.click('[data-testid="alert-rules"] tr[data-rule="node-lost"] a[href="/runbooks/node-lost/"]')
    assert page.locator('[data-testid="runbook"] h1').inner_text() == "Node lost"
    page.goto(f"{server_url}/runbooks/batch-timeout-exceeded/")
    shot(page, "34-runbook-batch-timeout")
