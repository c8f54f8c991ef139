"""The speculative-decoding rule's restarts in the control plane: one node of a pool at a time (also against
cleanups), audited as the system with the node's figures; what the node page and API show of the rule."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import EngineNode, NodeCommand
from controlplane.nodes.services import agent_sessions, cleanup
from controlplane.nodes.services.speculation import LEASE_S, speculation_lease_request
from controlplane.nodes.speculation_figures import speculation_figures
from tests.nodes.test_cleanup_services import connect, finish, staging  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

STATE = {
    "state": "on",
    "rejected_windows": 3,
    "backoff_windows": 3,
    "tokens_per_s": 41.5,
    "windows": [{"rejection": 0.71}],
    "last_change": "",
    "extra": "x" * 10_000,
}
REASON = "draft rejection above 40% for 3 consecutive 10 s windows (71%, 74%, 69%)"


def ask(node, action="off", reason=REASON, state=STATE):
    return speculation_lease_request(node_id=node.pk, action=action, reason=reason, state=state)


def test_one_node_of_a_pool_at_a_time_audited_as_the_system_with_its_figures(staging):  # noqa: F811
    _, (gpu1, gpu2, _) = staging
    granted, refusal = ask(gpu1)
    assert granted is not None and refusal == ""
    assert (granted.op, granted.requested_by, granted.sent_at is not None) == ("speculation_off", None, True)
    assert granted.reason == "automatic: " + REASON
    entry = AuditEntry.objects.get(action="node.speculation_off")
    assert (entry.actor_name, entry.target_id, entry.reason) == ("system", str(gpu1.pk), granted.reason)
    assert entry.after["figures"]["rejected_windows"] == 3 and entry.after["figures"]["tokens_per_s"] == 41.5
    assert "extra" not in entry.after["figures"] and "windows" not in entry.after["figures"]

    refused, refusal = ask(gpu2)
    assert refused is None and refusal == "gpu-1 of pool staging is out of service (speculative decoding off)"
    again, refusal = ask(gpu1)
    assert again is None and "earlier command" in refusal
    # No cleanup starts beside it either.
    assert cleanup.cleanup_lease_request(node_id=gpu2.pk, trigger="timer")[0] is None
    assert AuditEntry.objects.filter(action__startswith="node.speculation").count() == 1

    finish(granted, result=json.dumps({"speculation": "off", "restarted": True}))
    second, _ = ask(gpu2)
    assert second is not None
    finish(second)
    on, _ = ask(gpu1, action="on", reason="generation at 9.0 tokens/s, below 15, after 300 s off: probing")
    assert on.op == "speculation_on" and AuditEntry.objects.filter(action="node.speculation_on").count() == 1


def test_a_running_cleanup_holds_the_rule_back(staging):  # noqa: F811
    _, (gpu1, gpu2, _) = staging
    assert cleanup.cleanup_lease_request(node_id=gpu1.pk, trigger="timer")[0] is not None
    refused, refusal = ask(gpu2)
    assert refused is None and refusal == "gpu-1 of pool staging is out of service (clean up memory)"


def test_a_lease_whose_node_is_lost_or_never_reports_ends(staging):  # noqa: F811
    _, (gpu1, gpu2, gpu3) = staging
    granted, _ = ask(gpu1)
    EngineNode.objects.filter(pk=gpu1.pk).update(is_connected=False)
    assert ask(gpu2)[0] is not None
    granted.refresh_from_db()
    assert granted.state == "failed" and "lost" in granted.result

    stale = NodeCommand.objects.filter(node=gpu2, op="speculation_off").get()
    NodeCommand.objects.filter(pk=stale.pk).update(sent_at=stale.sent_at.replace(year=2000))
    assert LEASE_S < 10**9
    assert ask(gpu3)[0] is not None
    stale.refresh_from_db()
    assert stale.state == "failed" and "never reported" in stale.result


@pytest.mark.parametrize("action", ["", "maybe", "off; rm -rf"])
def test_an_unknown_action_is_refused_and_changes_nothing(staging, action):  # noqa: F811
    _, (gpu1, *_) = staging
    command, refusal = ask(gpu1, action=action)
    assert command is None and refusal.startswith("action: must be off or on")
    assert not NodeCommand.objects.exists() and not AuditEntry.objects.filter(action__contains="speculation").exists()


def test_people_cannot_send_the_rules_ops(api_for, staging):  # noqa: F811
    url = reverse("api:node-command-list", kwargs={"name": "gpu-1"})
    response = api_for("sre").post(url, {"op": "speculation_off", "reason": "try"}, format="json")
    assert response.status_code == 400 and "op" in response.content.decode()
    assert not NodeCommand.objects.exists()


def test_the_heartbeat_report_reaches_the_api_and_the_node_page(api_for, sre, staging):  # noqa: F811
    _, (gpu1, *_) = staging
    report = {
        "state": "off",
        "rejected_windows": 0,
        "backoff_windows": 3,
        "off_for_s": 42,
        "probe_after_s": 300,
        "tokens_per_s": 12.25,
        "last_change": REASON,
    }
    agent_sessions.node_heartbeat(node_id=gpu1.pk, heartbeat={"status": "online", "speculation": report})
    node = api_for("sre").get(reverse("api:node-detail", kwargs={"name": "gpu-1"})).json()
    assert node["speculation"]["state"] == "off" and node["speculation"]["last_change"] == REASON
    assert node["speculation"]["text"] == (
        "off for 42 s; probed again after 300 s while generation is slow; generation 12.2 tokens/s per request"
    )
    browser = Client()
    browser.force_login(sre)
    page = browser.get(reverse("dashboard:node-detail", kwargs={"name": "gpu-1"})).content.decode()
    assert "off for 42 s" in page and REASON in page
    # A hostile report keeps only plain values of known keys.
    agent_sessions.node_heartbeat(node_id=gpu1.pk, heartbeat={"speculation": {"state": ["x"], "tokens_per_s": True}})
    gpu1.refresh_from_db()
    assert gpu1.speculation == {}


def test_the_rules_restarts_read_in_words():
    restarted = speculation_figures(result=json.dumps({"speculation": "on", "restarted": True, "warmup": "passed"}))
    assert restarted == {"state": "on", "text": "engine restarted with speculative decoding · warmup passed"}
    assert speculation_figures(result=json.dumps({"speculation": "off", "restarted": False}))["text"] == (
        "speculative decoding off; the engine already ran that way"
    )
    for result in ("", "not json", "[]", json.dumps({"speculation": "maybe"})):
        assert speculation_figures(result=result) is None
