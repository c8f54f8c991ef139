"""Alert rules: the default pack, versioned edits (409 on a stale base), validation, the audit entry's diff."""

import pytest
from django.urls import reverse

from controlplane.alerts.defaults import DEFAULT_RULES
from controlplane.alerts.models import AlertRule, AlertRuleVersion
from controlplane.alerts.runbooks import runbook_exists
from controlplane.alerts.selectors import current_rule_versions
from controlplane.alerts.services.rules import alert_rule_create, alert_rule_version_create
from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import DomainError, InvalidField

pytestmark = pytest.mark.django_db

P99 = {
    "metric": "latency_p99_s", "scope": "node", "comparison": "gt", "warn": 1.6, "critical": 2.0, "for_s": 10,
    "runbook": "p99-latency", "summary": "P99 above the SLO line", "is_enabled": True,
}  # fmt: skip


def test_the_default_pack_is_the_seeds_table_plus_the_fleet_signals(default_rules):
    rules = {v.rule.name: v for v in current_rule_versions()}
    assert set(rules) == {spec["name"] for spec in DEFAULT_RULES}
    seed = {name: (rules[name].metric, rules[name].warn, rules[name].critical) for name in rules}
    assert seed["p99-latency"] == ("latency_p99_s", 1.6, 2.0)
    assert seed["batch-idle"] == ("batch_idle_ratio", 0.15, 0.25)
    assert seed["spec-decode-rejection"] == ("spec_rejection_rate", 0.40, 0.60)
    assert seed["memory-fragmentation"] == ("fragmentation_ratio", 0.20, 0.35)
    assert seed["long-requests"] == ("long_request_share", 0.05, None)
    assert {"node-lost", "engine-restarting", "rollout-nacked", "metrics-stale"} <= set(rules)
    for version in rules.values():
        assert version.author is None and version.number == 1 and version.is_enabled
        assert runbook_exists(version.runbook), version.runbook


def test_a_new_version_is_numbered_audited_with_the_diff_and_old_versions_stay(default_rules, sre):
    rule = AlertRule.objects.get(name="p99-latency")
    version = alert_rule_version_create(
        actor=sre, rule=rule, base_number=1, comment="festival: page earlier", **{**P99, "warn": 1.4, "for_s": 6}
    )
    assert (version.number, version.base_number, version.warn, version.for_s) == (2, 1, 1.4, 6)
    rule.refresh_from_db()
    assert rule.latest_number == 2
    assert rule.versions.get(number=1).warn == 1.6
    entry = AuditEntry.objects.get(action="alert_rule.version_create")
    assert entry.before == {"warn": 1.6, "for_s": 10, "summary": rule.versions.get(number=1).summary}
    assert entry.after == {"warn": 1.4, "for_s": 6, "summary": "P99 above the SLO line"}
    assert entry.reason == "festival: page earlier" and entry.actor_name == "sre"
    with pytest.raises(DomainError, match="immutable"):
        version.save()


def test_a_stale_base_is_refused_with_409_and_stores_nothing(default_rules, sre, admin_user):
    rule = AlertRule.objects.get(name="batch-idle")
    fields = rule.versions.get(number=1).fields()
    alert_rule_version_create(actor=sre, rule=rule, base_number=1, **{**fields, "warn": 0.2})
    with pytest.raises(DomainError) as refused:
        alert_rule_version_create(actor=admin_user, rule=rule, base_number=1, **{**fields, "warn": 0.1})
    assert refused.value.status_code == 409 and refused.value.code == "stale_base_version"
    assert refused.value.detail["current_version"]["warn"] == 0.2
    assert AlertRuleVersion.objects.filter(rule=rule).count() == 2


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"metric": "p42"}, "metric", "unknown metric"),
        ({"metric": "node_lost", "scope": "pool"}, "scope", "exists at scope node"),
        ({"comparison": "eq"}, "comparison", "one of gt"),
        ({"warn": "high"}, "warn", "must be a number"),
        ({"warn": float("nan")}, "warn", "finite"),
        ({"critical": 1.0}, "critical", "at or above the warning threshold"),
        ({"comparison": "lt", "warn": 0.5, "critical": 0.6}, "critical", "at or below"),
        ({"for_s": -1}, "for_s", "between 0 and 3600"),
        ({"for_s": 2.5}, "for_s", "whole number"),
        ({"runbook": "no-such-runbook"}, "runbook", "no runbook"),
        ({"summary": "  "}, "summary", "required"),
    ],
)
def test_bad_fields_name_the_field_and_store_nothing(default_rules, sre, change, field, message):
    before = AuditEntry.objects.count()
    with pytest.raises(InvalidField) as refused:
        alert_rule_create(actor=sre, name="new-rule", **{**P99, **change})
    assert refused.value.message.startswith(f"{field}: ") and message in refused.value.message
    assert not AlertRule.objects.filter(name="new-rule").exists()
    assert AuditEntry.objects.count() == before


def test_api_edits_from_the_base_and_keeps_fields_left_out(default_rules, api_for):
    url = reverse("api:alert-rule-version-list", kwargs={"name": "p99-latency"})
    response = api_for("sre").post(url, {"base_version": 1, "warn": 1.5, "comment": "tighter"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["number"], body["warn"], body["critical"], body["for_s"]) == (2, 1.5, 2.0, 10)
    assert body["condition"] == "latency_p99_s > 1.5 s warn / 2 s critical for 10 s"
    stale = api_for("admin").post(url, {"base_version": 1, "warn": 1.7}, format="json")
    assert stale.status_code == 409 and stale.json()["code"] == "stale_base_version"
    typo = api_for("sre").post(url, {"base_version": 2, "wran": 1.7}, format="json")
    assert typo.status_code == 400 and "wran" in typo.json()["error"]
    assert api_for("oncall").post(url, {"base_version": 2, "warn": 1.7}, format="json").status_code == 403


def test_rule_page_saves_a_version_and_refuses_a_stale_one(default_rules, users, client):
    client.force_login(users["sre"])
    url = reverse("dashboard:alert-rule", kwargs={"name": "metrics-stale"})
    current = AlertRule.objects.get(name="metrics-stale").versions.get(number=1)
    form = {**current.fields(), "critical": "", "base_version": 1, "warn": 15, "comment": "agents on slow links"}
    form["is_enabled"] = "on"
    response = client.post(url, form)
    assert response.status_code == 302
    assert AlertRule.objects.get(name="metrics-stale").latest_number == 2
    again = client.post(url, {**form, "warn": 20})
    assert again.status_code == 409
    assert "stale" in again.content.decode()
    page = client.get(url).content.decode()
    assert "agents on slow links" in page and "metrics_stale_s &gt; 15 s warn" in page
