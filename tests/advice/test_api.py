"""The suggestion endpoints: what each role may read and open, the draft version and its audit entry, refusals."""

import pytest
from django.urls import reverse

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import Pool
from controlplane.params.models import TemplateVersion
from tests.advice.builders import running, versions_of, window_rows
from tests.helpers import state_snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def staging(agent, sre):
    _, (v1,) = versions_of(agent, [16])
    pool = running(sre, v1)
    window_rows(pool.name, batch_idle_ratio=0.22, batch_size_hist={"3": 9, "6": 1}, long_request_share=0.01)
    return pool


def apply_url(pool="staging"):
    return reverse("api:pool-suggestion-apply", kwargs={"name": pool})


@pytest.mark.parametrize("role", ["agent", "oncall", "sre", "admin"])
def test_every_role_reads_the_pool_suggestions_with_their_evidence(api_for, staging, role):
    response = api_for(role).get(reverse("api:pool-suggestions", kwargs={"name": "staging"}))
    assert response.status_code == 200
    body = response.json()
    assert body["template"] == "chat" and body["version"] == 1 and body["window"]["seconds"] == 600
    (found,) = body["suggestions"]
    assert found["id"] == "batch-idle" and found["severity"] == "warning"
    assert found["changes"] == [{"path": "batch.max_size", "from": 16, "to": 3, "apply": "hot"}]
    idle = found["evidence"][0]
    assert idle["display"] == "22.0%" and idle["samples"] == 120
    assert idle["link"].startswith("/api/v1/metrics/pool/staging/?metric=batch_idle_ratio&since=")
    assert found["links"]["preview"] == "/pools/staging/suggestions/batch-idle/"


def test_anonymous_reads_nothing(api_for, staging):
    assert api_for(None).get(reverse("api:pool-suggestions", kwargs={"name": "staging"})).status_code in (401, 403)


def test_a_pool_without_figures_or_version_has_no_suggestions(api_for, sre):
    from controlplane.nodes.services.pools import pool_create

    pool_create(actor=sre, name="empty", is_production=False)
    body = api_for("agent").get(reverse("api:pool-suggestions", kwargs={"name": "empty"})).json()
    assert body["suggestions"] == [] and body["version"] is None


def test_an_agent_opens_a_suggestion_as_a_draft_version_citing_its_evidence(api_for, staging):
    response = api_for("agent").post(apply_url(), {"suggestion": "batch-idle", "comment": "try it"}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["number"] == 2 and response.json()["is_published"] is False
    draft = TemplateVersion.objects.get(template__name="chat", number=2)
    assert draft.params["batch"]["max_size"] == 3 and draft.base_number == 1
    assert draft.comment.startswith("Suggestion batch-idle on pool staging (chat v1): batch.max_size 16 -> 3.")
    assert "batch idle ratio, window mean 22.0% over 120 s" in draft.comment and draft.comment.endswith("try it")
    entry = AuditEntry.objects.filter(action="template.version_create").latest("pk")
    assert entry.actor_name == "agent" and entry.reason == draft.comment
    assert Pool.objects.get(name="staging").desired_version.number == 1  # nothing published


def test_oncall_may_not_open_a_draft_and_nothing_changes(api_for, staging):
    before = state_snapshot()
    assert api_for("oncall").post(apply_url(), {"suggestion": "batch-idle"}, format="json").status_code == 403
    assert state_snapshot() == before


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({}, 400, "suggestion"),
        ({"suggestion": "batch-idle", "extra": 1}, 400, "extra"),
        ({"suggestion": 5}, 400, "suggestion"),
        ({"suggestion": "batch-idle", "base_version": 0}, 400, "base_version"),
        ({"suggestion": "batch-idle", "base_version": 9}, 400, "base_version"),
        ({"suggestion": "no-such-rule"}, 404, "suggestion"),
    ],
)
def test_bad_apply_input_names_the_field_and_stores_nothing(api_for, staging, body, status, field):
    before = state_snapshot()
    response = api_for("agent").post(apply_url(), body, format="json")
    assert response.status_code == status
    assert field in response.json()["error"]
    assert state_snapshot() == before


def test_a_stale_base_version_is_409(api_for, staging, agent):
    client = api_for("agent")
    assert client.post(apply_url(), {"suggestion": "batch-idle"}, format="json").status_code == 201
    response = client.post(apply_url(), {"suggestion": "batch-idle", "base_version": 1}, format="json")
    assert response.status_code == 409 and "stale" in response.json()["error"]


def test_the_same_change_twice_is_409(api_for, staging):
    client = api_for("agent")
    assert client.post(apply_url(), {"suggestion": "batch-idle"}, format="json").status_code == 201
    response = client.post(apply_url(), {"suggestion": "batch-idle"}, format="json")
    assert response.status_code == 409 and "already has this change" in response.json()["error"]


def long_context_version(agent, threshold: int, name: str):
    return versions_of(agent, [8], name=name)[1][0], {
        "inference_params": {"batch": {"long_context_threshold": threshold}, "max_tokens": {"whitelist": []}}
    }


def test_advice_only_is_not_a_draft(api_for, agent, sre):
    from controlplane.params.services.templates import template_version_create

    v1, document = long_context_version(agent, 1024, "long")
    v2 = template_version_create(actor=agent, template=v1.template, document=document, base_number=1)
    pool = running(sre, v2, name="long-pool")  # long requests already take the long queue: advice only
    window_rows(pool.name, long_request_share=0.2)
    before = state_snapshot()
    response = api_for("agent").post(apply_url("long-pool"), {"suggestion": "long-requests"}, format="json")
    assert response.status_code == 400 and "advice only" in response.json()["error"]
    assert state_snapshot() == before


def test_a_latest_version_that_already_has_the_change_is_409(api_for, agent, sre):
    from controlplane.params.services.templates import template_version_create

    v1, document = long_context_version(agent, 1024, "long")
    pool = running(sre, v1, name="long-pool")  # runs 2048; the latest version already lowered it
    template_version_create(actor=agent, template=v1.template, document=document, base_number=1)
    window_rows(pool.name, long_request_share=0.2)
    response = api_for("agent").post(apply_url("long-pool"), {"suggestion": "long-requests"}, format="json")
    assert response.status_code == 409 and "already has this change" in response.json()["error"]


def test_template_suggestions_list_every_pool_running_it(api_for, staging, sre):
    running(sre, staging.desired_version, name="canary")
    window_rows("canary", spec_rejection_rate=0.9)  # speculative decoding is off in chat v1: no suggestion
    body = api_for("oncall").get(reverse("api:template-suggestions", kwargs={"name": "chat"})).json()
    assert [(s["pool"], s["id"]) for s in body["suggestions"]] == [("staging", "batch-idle")]


def test_template_apply_needs_a_pool_running_the_template(api_for, staging, agent, sre):
    _, (other,) = versions_of(agent, [4], name="other")
    running(sre, other, name="elsewhere")
    url = reverse("api:template-suggestion-apply", kwargs={"name": "other"})
    response = api_for("agent").post(url, {"pool": "staging", "suggestion": "batch-idle"}, format="json")
    assert response.status_code == 400 and "pool" in response.json()["error"]
    url = reverse("api:template-suggestion-apply", kwargs={"name": "chat"})
    response = api_for("sre").post(url, {"pool": "staging", "suggestion": "batch-idle"}, format="json")
    assert response.status_code == 201 and response.json()["ref"] == "chat:2"


def test_the_lines_follow_the_alert_rules_as_sres_edit_them(api_for, staging, sre):
    from controlplane.advice.selectors import pool_suggestions
    from controlplane.alerts.defaults import install_default_rules
    from controlplane.alerts.models import AlertRule, AlertRuleVersion
    from controlplane.alerts.services.rules import alert_rule_version_create

    install_default_rules(AlertRule, AlertRuleVersion)
    pool = Pool.objects.get(name="staging")

    def batch_idle_line(warn: float) -> None:
        rule = AlertRule.objects.get(name="batch-idle")
        fields = rule.versions.get(number=rule.latest_number).fields() | {"warn": warn}
        alert_rule_version_create(actor=sre, rule=rule, base_number=rule.latest_number, **fields)

    batch_idle_line(0.22)
    assert pool_suggestions(pool=pool, use_cache=False)["suggestions"] == []  # 22 % is not above a 22 % line
    batch_idle_line(0.2)
    found = pool_suggestions(pool=pool, use_cache=False)["suggestions"]
    assert [s["id"] for s in found] == ["batch-idle"] and found[0]["evidence"][1]["display"] == "20.0%"
