"""Pool services: publishing, the production gate, rollbacks, previews and release events."""

import json

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import Conflict, Forbidden, InvalidField
from controlplane.nodes import selectors
from controlplane.nodes.exceptions import NothingToRollBack, ProductionGateClosed
from controlplane.nodes.models import Pool, PoolRelease
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish, pool_rollback
from controlplane.params.services.templates import template_version_create
from tests.factories import pools, ran_healthy, template_with_versions
from tests.helpers import state_snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def versions(agent):
    return template_with_versions(agent, temperatures=(0.3, 0.2, 0.1))[1]


@pytest.fixture
def staging_prod(sre):
    return pools(sre)


@pytest.fixture
def sent(monkeypatch):
    """Events handed to the channel layer, in order."""
    events = []
    monkeypatch.setattr("controlplane.lib.realtime.send", lambda groups, event: events.append((groups, event)))
    return events


def desired_pool(pool: Pool) -> Pool:
    return Pool.objects.get(pk=pool.pk)


def desired(pool: Pool):
    return desired_pool(pool).desired_version


def test_pool_names_must_be_slugs_and_unique(sre):
    pool_create(actor=sre, name="staging", is_production=False)
    with pytest.raises(Conflict, match="name: a pool named 'staging' already exists"):
        pool_create(actor=sre, name="staging", is_production=True)
    with pytest.raises(InvalidField, match="name: must be 1-64"):
        pool_create(actor=sre, name="-bad", is_production=False)
    assert Pool.objects.count() == 1


def test_publish_sets_the_desired_version_and_records_a_release(sre, versions, staging_prod):
    staging, _ = staging_prod
    v1, v2, _ = versions
    first = pool_publish(actor=sre, pool=staging, version=v1, reason="first rollout")
    second = pool_publish(actor=sre, pool=staging, version=v2, reason="cooler strict tier")
    assert desired(staging) == v2
    assert (first.previous_version, second.previous_version) == (None, v1)
    assert second.kind == PoolRelease.Kind.PUBLISH
    entry = AuditEntry.objects.filter(action="pool.publish").first()
    assert entry.reason == "cooler strict tier"
    assert entry.before["desired_version"]["number"] == 1
    assert entry.after["desired_version"] == {"template": "chat", "number": 2, "hash": v2.content_hash}


def test_publishing_the_current_version_again_is_a_conflict(sre, versions, staging_prod):
    staging, _ = staging_prod
    pool_publish(actor=sre, pool=staging, version=versions[0], reason="r")
    before = state_snapshot()
    with pytest.raises(Conflict, match="already the desired version of staging"):
        pool_publish(actor=sre, pool=staging, version=versions[0], reason="again")
    assert state_snapshot() == before


@pytest.mark.parametrize("reason", ["", "   "])
def test_publish_needs_a_reason(sre, versions, staging_prod, reason):
    with pytest.raises(InvalidField, match="reason: required"):
        pool_publish(actor=sre, pool=staging_prod[0], version=versions[0], reason=reason)
    assert desired(staging_prod[0]) is None


def test_production_gate_refuses_a_version_that_never_ran_outside_production(sre, versions, staging_prod):
    _, prod = staging_prod
    before = state_snapshot()
    with pytest.raises(ProductionGateClosed) as caught:
        pool_publish(actor=sre, pool=prod, version=versions[0], reason="straight to prod")
    assert caught.value.code == "production_gate"
    assert caught.value.status_code == 409
    assert caught.value.message == (
        "version: chat v1 has not run on a non-production pool yet: it was never published to a non-production "
        "pool; publish it to staging first; or an SRE gives override_reason"
    )
    assert state_snapshot() == before


def test_production_gate_opens_after_a_node_ran_the_version_on_staging(sre, versions, staging_prod):
    staging, prod = staging_prod
    pool_publish(actor=sre, pool=staging, version=versions[0], reason="stage it")
    node, _ = node_create(actor=sre, name="gpu-1", pool=staging)
    ran_healthy(node, versions[0])
    release = pool_publish(actor=sre, pool=prod, version=versions[0], reason="promote", override_reason="not needed")
    assert desired(prod) == versions[0]
    # The gate was open, so nothing was overridden and the timeline must not claim otherwise.
    assert release.override_reason == ""
    assert AuditEntry.objects.filter(action="pool.publish").first().after["override_reason"] is None


def test_sre_override_skips_the_gate_and_is_recorded(sre, versions, staging_prod):
    _, prod = staging_prod
    release = pool_publish(
        actor=sre, pool=prod, version=versions[0], reason="hotfix", override_reason="  incident 42, staging down "
    )
    assert desired(prod) == versions[0]
    assert release.override_reason == "incident 42, staging down"
    entry = AuditEntry.objects.filter(action="pool.publish").first()
    assert entry.after["override_reason"] == "incident 42, staging down"


@pytest.mark.parametrize("role", ["agent", "oncall"])
def test_only_an_sre_may_override_the_gate(users, versions, staging_prod, role):
    _, prod = staging_prod
    before = state_snapshot()
    with pytest.raises(Forbidden, match="only an SRE"):
        pool_publish(actor=users[role], pool=prod, version=versions[0], reason="r", override_reason="please")
    assert state_snapshot() == before


def test_override_reason_is_dropped_on_non_production_pools(sre, versions, staging_prod):
    release = pool_publish(actor=sre, pool=staging_prod[0], version=versions[0], reason="r", override_reason="x")
    assert release.override_reason == ""


def test_rollback_returns_to_the_previous_version(sre, versions, staging_prod):
    staging, _ = staging_prod
    v1, v2, _ = versions
    pool_publish(actor=sre, pool=staging, version=v1, reason="r1")
    pool_publish(actor=sre, pool=staging, version=v2, reason="r2")
    release = pool_rollback(actor=sre, pool=staging, reason="v2 hurts latency")
    assert desired(staging) == v1
    assert (release.kind, release.version, release.previous_version) == ("rollback", v1, v2)
    entry = AuditEntry.objects.filter(action="pool.rollback").get()
    assert entry.reason == "v2 hurts latency"
    assert entry.before["desired_version"]["number"] == 2
    assert entry.after["desired_version"]["number"] == 1


def test_rollback_to_any_earlier_version_the_pool_ran(sre, versions, staging_prod):
    staging, _ = staging_prod
    v1, v2, v3 = versions
    for version in versions:
        pool_publish(actor=sre, pool=staging, version=version, reason="r")
    assert selectors.pool_rollback_targets(pool=desired_pool(staging)) == [v2, v1]
    pool_rollback(actor=sre, pool=staging, version=v1, reason="back to the start")
    assert desired(staging) == v1
    assert selectors.pool_rollback_targets(pool=desired_pool(staging)) == [v3, v2]


def test_rollback_to_a_version_the_pool_never_ran_is_refused(sre, versions, staging_prod):
    staging, _ = staging_prod
    v1, v2, v3 = versions
    pool_publish(actor=sre, pool=staging, version=v1, reason="r")
    pool_publish(actor=sre, pool=staging, version=v2, reason="r")
    before = state_snapshot()
    with pytest.raises(InvalidField, match="version: chat v3 never ran on staging"):
        pool_rollback(actor=sre, pool=staging, version=v3, reason="r")
    assert state_snapshot() == before


def test_rollback_with_no_history_is_a_conflict(sre, versions, staging_prod):
    staging, _ = staging_prod
    with pytest.raises(NothingToRollBack):
        pool_rollback(actor=sre, pool=staging, reason="r")
    pool_publish(actor=sre, pool=staging, version=versions[0], reason="r")
    with pytest.raises(NothingToRollBack, match="staging has no earlier version"):
        pool_rollback(actor=sre, pool=staging, reason="r")
    assert desired(staging) == versions[0]


def test_rollback_needs_a_reason(sre, versions, staging_prod):
    staging, _ = staging_prod
    pool_publish(actor=sre, pool=staging, version=versions[0], reason="r")
    pool_publish(actor=sre, pool=staging, version=versions[1], reason="r")
    with pytest.raises(InvalidField, match="reason: required"):
        pool_rollback(actor=sre, pool=staging, reason=" ")
    assert desired(staging) == versions[1]


def test_change_preview_lists_each_field_with_hot_or_cold(agent, sre, staging_prod):
    template, (v1,) = template_with_versions(agent)
    cold = template_version_create(
        actor=agent,
        template=template,
        document={"inference_params": {"max_tokens": {"whitelist": []}, "engine": {"max_num_seqs": 32}}},
        base_number=1,
    )
    staging, _ = staging_prod
    pool_publish(actor=sre, pool=staging, version=cold, reason="r")
    changes = selectors.pool_change_preview(pool=desired_pool(staging), version=v1)
    assert [c.as_dict() for c in changes] == [
        {"path": "engine.max_num_seqs", "old": 32, "new": 64, "apply": "cold"},
    ]


def test_timeline_is_newest_first(sre, versions, staging_prod):
    staging, _ = staging_prod
    pool_publish(actor=sre, pool=staging, version=versions[0], reason="one")
    pool_publish(actor=sre, pool=staging, version=versions[1], reason="two")
    pool_rollback(actor=sre, pool=staging, reason="three")
    assert [r.reason for r in selectors.pool_timeline(pool=staging)] == ["three", "two", "one"]


def test_release_event_is_sent_only_after_commit(sre, versions, staging_prod, sent, django_capture_on_commit_callbacks):
    staging, _ = staging_prod
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        pool_publish(actor=sre, pool=staging, version=versions[0], reason="go")
    assert sent == []
    for callback in callbacks:
        callback()
    [(groups, event), (agent_groups, push)] = sent
    assert groups == ["fleet", "pool.staging"]
    assert event["type"] == "pool.released"
    # The same commit pushes the config to every agent of the pool, once, through the pool's agent group.
    assert agent_groups == ["agents.staging"]
    assert (push["type"], push["hash"]) == ("config.push", versions[0].content_hash)
    assert json.loads(push["text"]) == {
        "type": "config",
        "version": {"template": "chat", "number": 1, "hash": versions[0].content_hash},
        "hash": versions[0].content_hash,
        "content": versions[0].effective_params,
    }
    assert (event["pool"], event["kind"], event["actor"], event["reason"]) == ("staging", "publish", "sre", "go")
    assert event["version"] == {"template": "chat", "number": 1, "hash": versions[0].content_hash}
    assert event["previous_version"] is None


def test_refused_publish_sends_no_event(sre, versions, staging_prod, sent, django_capture_on_commit_callbacks):
    _, prod = staging_prod
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ProductionGateClosed):
        pool_publish(actor=sre, pool=prod, version=versions[0], reason="go")
    assert sent == []
