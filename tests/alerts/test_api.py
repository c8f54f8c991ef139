"""The alerting API and the on-call page beyond who may call them: filters, contents, refusals."""

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import AlertGroup, Silence

pytestmark = pytest.mark.django_db


@pytest.fixture
def incident(fleet, clock):
    fleet.add("gpu-1")
    fleet.add("gpu-2")
    fleet.sample("gpu-2", clock.now, latency_p99_s=1.8)
    fleet.disconnect("gpu-1")
    evaluate(now=clock.now)
    return AlertGroup.objects.get()


def test_alert_list_filters_by_state_rule_and_node(incident, api_for):
    client = api_for("oncall")
    url = reverse("api:alert-list")
    open_alerts = client.get(url).json()["results"]
    assert sorted((a["rule"], a["name"], a["state"]) for a in open_alerts) == [
        ("node-lost", "gpu-1", "firing"),
        ("p99-latency", "gpu-2", "pending"),
    ]
    assert [a["name"] for a in client.get(url, {"state": "pending"}).json()["results"]] == ["gpu-2"]
    assert [a["rule"] for a in client.get(url, {"node": "gpu-1"}).json()["results"]] == ["node-lost"]
    assert client.get(url, {"state": "sideways"}).status_code == 400


def test_incident_detail_lists_alerts_and_events(incident, api_for):
    sre = api_for("sre")
    ack = sre.post(reverse("api:incident-ack", kwargs={"pk": incident.pk}), {"note": "rebooting"}, format="json")
    assert ack.status_code == 200 and ack.json()["acknowledged_by"] == "sre"
    body = api_for("agent").get(reverse("api:incident-detail", kwargs={"pk": incident.pk})).json()
    assert (body["rule"], body["pool"], body["severity"], body["affected_count"]) == (
        "node-lost",
        "prod-main",
        "critical",
        1,
    )
    assert [e["kind"] for e in body["events"]] == ["firing", "acknowledged"]
    assert body["events"][1]["actor"] == "sre" and body["events"][1]["note"] == "rebooting"
    listed = api_for("agent").get(reverse("api:incident-list")).json()["results"]
    assert [i["id"] for i in listed] == [incident.pk]
    assert api_for("agent").get(reverse("api:incident-detail", kwargs={"pk": 999})).status_code == 404


def test_silences_api_creates_and_ends_with_reasons(incident, api_for):
    client = api_for("oncall")
    created = client.post(
        reverse("api:silence-list"), {"node": "gpu-1", "duration_minutes": 30, "reason": "reboot"}, format="json"
    )
    assert created.status_code == 201 and created.json()["created_by"] == "oncall"
    alerts = client.get(reverse("api:alert-list"), {"node": "gpu-1"}).json()["results"]
    assert alerts[0]["is_silenced"] is True
    no_matcher = client.post(reverse("api:silence-list"), {"duration_minutes": 30, "reason": "x"}, format="json")
    assert no_matcher.status_code == 400 and "matcher" in no_matcher.json()["error"]
    silence_id = created.json()["id"]
    ended = client.post(reverse("api:silence-expire", kwargs={"pk": silence_id}), {"reason": "back"}, format="json")
    assert ended.status_code == 200 and ended.json()["expired_by"] == "oncall"
    assert client.get(reverse("api:silence-list")).json()["results"] == []
    assert len(client.get(reverse("api:silence-list"), {"all": "1"}).json()["results"]) == 1
    again = client.post(reverse("api:silence-expire", kwargs={"pk": silence_id}), {"reason": "x"}, format="json")
    assert again.status_code == 409
    assert Silence.objects.count() == 1


def test_oncall_page_shows_the_incident_with_its_actions(incident, users):
    sre = Client()
    sre.force_login(users["sre"])
    page = sre.get(reverse("dashboard:oncall")).content.decode()
    assert f'data-incident="{incident.pk}"' in page and 'data-testid="incident-node-lost"' in page
    assert 'href="/runbooks/node-lost/"' in page
    assert 'href="/pools/prod-main/rollback/"' in page  # SREs may roll back from here
    # SREs may degrade the incident's pool from its card, with a reason.
    assert 'action="/pools/prod-main/degradation/"' in page and "Degrade prod-main</button>" in page
    assert 'action="/pools/prod-main/cleanup/"' in page and "Clean up prod-main</button>" in page
    assert 'name="node" value="gpu-1"' in page  # the silence matcher is prefilled from the incident
    pending = page[page.index('data-testid="pending"') :]
    assert "p99-latency" in pending[: pending.index("</table>")]

    oncall = Client()
    oncall.force_login(users["oncall"])
    page = oncall.get(reverse("dashboard:oncall")).content.decode()
    assert "Acknowledge</button>" in page and "/rollback/" not in page.split('id="incident-template"')[0]
    assert "/degradation/" not in page  # degrading is an operator's decision, not on-call's
    assert "/cleanup/" not in page
    agent = Client()
    agent.force_login(users["agent"])
    assert "Acknowledge</button>" not in agent.get(reverse("dashboard:oncall")).content.decode()
