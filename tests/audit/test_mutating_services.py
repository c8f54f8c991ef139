"""Every service registered as mutating writes exactly one audit entry, with actor, request id and reason."""

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.utils import timezone

import controlplane
from controlplane.accounts import services as accounts
from controlplane.audit.models import AuditEntry
from controlplane.audit.services import MUTATING_SERVICES
from controlplane.datasets.services import datasets, releases, training
from controlplane.lib.request_id import bind_request_id
from controlplane.nodes.models import EngineNode
from controlplane.nodes.services import engine_nodes
from controlplane.nodes.services import pools as nodes
from controlplane.operations import services as operations
from controlplane.params.services import templates, whitelists
from tests.conftest import PASSWORD
from tests.datasets.data import as_csv, easy_rows
from tests.datasets.factories import easy_dataset, train_now
from tests.factories import legal_whitelist, pools, template_with_versions


def import_every_module() -> None:
    """Registration happens at import time, so import the whole project before reading the registry."""
    for module in pkgutil.walk_packages(controlplane.__path__, "controlplane."):
        if ".migrations" not in module.name:
            importlib.import_module(module.name)


@dataclass(frozen=True)
class Case:
    action: str
    actor: str  # username the entry must name
    reason: str
    call: Callable[[dict], object]


def _publish_twice_then(call):
    def run(world):
        staging = world["staging"]
        nodes.pool_publish(actor=world["sre"], pool=staging, version=world["v1"], reason="first")
        nodes.pool_publish(actor=world["sre"], pool=staging, version=world["v2"], reason="second")
        world["baseline"] = AuditEntry.objects.count()
        return call(world)

    return run


def _with_node_then(call):
    """Register node gpu-1 in staging, connected, then run the call on it."""

    def run(world):
        node, _ = engine_nodes.node_create(actor=world["sre"], name="gpu-1", pool=world["staging"])
        EngineNode.objects.filter(pk=node.pk).update(is_connected=True, last_seen_at=timezone.now())
        world["baseline"] = AuditEntry.objects.count()
        return call(world, node)

    return run


def _with_override_then(call):
    """Set an override of conversation conv-1 on staging, then run the call on it."""

    def run(world):
        override = operations.override_set(
            actor=world["agent"], pool=world["staging"], conversation="conv-1", tier="strict", reason="refund dispute"
        )
        world["baseline"] = AuditEntry.objects.count()
        return call(world, override)

    return run


def _with_intent_model_then(call):
    """Upload dataset `easy` and train its model #1 (above the default floor), then run the call on it."""

    def run(world):
        model = train_now(world["agent"], easy_dataset(world["agent"], templates_per_label=2), epochs=1)
        world["baseline"] = AuditEntry.objects.count()
        return call(world, model)

    return run


def _publish_then_unpublish(world, model):
    releases.intent_model_publish(actor=world["sre"], pool=world["prod"], intent_model=model, reason="go")
    world["baseline"] = AuditEntry.objects.count()
    return releases.intent_model_unpublish(actor=world["admin"], pool=world["prod"], reason="regression")


CASES: dict[str, Case] = {
    "controlplane.datasets.services.datasets.intent_dataset_create": Case(
        "intent_dataset.create",
        "agent",
        "",
        lambda w: datasets.intent_dataset_create(
            actor=w["agent"], name="shop", content=as_csv(easy_rows(2)), fmt="csv"
        ),
    ),
    "controlplane.datasets.services.training.intent_model_create": Case(
        "intent_model.create",
        "sre",
        "",
        _with_intent_model_then(lambda w, m: training.intent_model_create(actor=w["sre"], dataset=m.dataset)),
    ),
    "controlplane.datasets.services.releases.intent_model_publish": Case(
        "intent_model.publish",
        "sre",
        "better on refunds",
        _with_intent_model_then(
            lambda w, m: releases.intent_model_publish(
                actor=w["sre"], pool=w["staging"], intent_model=m, reason="better on refunds"
            )
        ),
    ),
    "controlplane.datasets.services.releases.intent_model_unpublish": Case(
        "intent_model.unpublish",
        "admin",
        "regression",
        _with_intent_model_then(_publish_then_unpublish),
    ),
    "controlplane.operations.services.override_set": Case(
        "override.set",
        "agent",
        "customer disputes a refund",
        lambda w: operations.override_set(
            actor=w["agent"], pool=None, conversation="conv-9", temperature=0.1, reason="customer disputes a refund"
        ),
    ),
    "controlplane.operations.services.override_revoke": Case(
        "override.revoke",
        "sre",
        "resolved",
        _with_override_then(lambda w, o: operations.override_revoke(actor=w["sre"], override=o, reason="resolved")),
    ),
    "controlplane.nodes.services.engine_nodes.node_create": Case(
        "node.create",
        "sre",
        "",
        lambda w: engine_nodes.node_create(actor=w["sre"], name="gpu-9", pool=w["staging"]),
    ),
    "controlplane.nodes.services.engine_nodes.node_token_rotate": Case(
        "node.token_rotate",
        "admin",
        "quarterly rotation",
        _with_node_then(
            lambda w, n: engine_nodes.node_token_rotate(actor=w["admin"], node=n, reason="quarterly rotation")
        ),
    ),
    "controlplane.nodes.services.engine_nodes.node_token_revoke": Case(
        "node.token_revoke",
        "sre",
        "host decommissioned",
        _with_node_then(
            lambda w, n: engine_nodes.node_token_revoke(actor=w["sre"], node=n, reason="host decommissioned")
        ),
    ),
    "controlplane.nodes.services.engine_nodes.node_command_request": Case(
        "node.restart",
        "sre",
        "engine wedged",
        _with_node_then(
            lambda w, n: engine_nodes.node_command_request(actor=w["sre"], node=n, op="restart", reason="engine wedged")
        ),
    ),
    "controlplane.accounts.services.user_create": Case(
        "user.create",
        "admin",
        "",
        lambda w: accounts.user_create(actor=w["admin"], username="newbie", password=PASSWORD, role="oncall"),
    ),
    "controlplane.accounts.services.user_update": Case(
        "user.update",
        "admin",
        "promoted after training",
        lambda w: accounts.user_update(actor=w["admin"], user=w["agent"], role="sre", reason="promoted after training"),
    ),
    "controlplane.accounts.services.user_token_issue": Case(
        "user.token_issue",
        "oncall",
        "",
        lambda w: accounts.user_token_issue(username="oncall", password=PASSWORD),
    ),
    "controlplane.params.services.templates.template_create": Case(
        "template.create", "agent", "", lambda w: templates.template_create(actor=w["agent"], name="fresh")
    ),
    "controlplane.params.services.templates.template_version_create": Case(
        "template.version_create",
        "agent",
        "tighter strict tier",
        lambda w: templates.template_version_create(
            actor=w["agent"],
            template=w["template"],
            document={"inference_params": {"temperature": {"strict": 0.1}}},
            base_number=2,
            comment="tighter strict tier",
        ),
    ),
    "controlplane.params.services.whitelists.whitelist_create": Case(
        "whitelist.create",
        "agent",
        "vip customers",
        lambda w: whitelists.whitelist_create(actor=w["agent"], name="vip", scenarios=["vip"], comment="vip customers"),
    ),
    "controlplane.params.services.whitelists.whitelist_version_create": Case(
        "whitelist.version_create",
        "sre",
        "add contracts",
        lambda w: whitelists.whitelist_version_create(
            actor=w["sre"],
            whitelist=w["legal"],
            scenarios=["legal", "contracts"],
            base_number=1,
            comment="add contracts",
        ),
    ),
    "controlplane.nodes.services.pools.pool_create": Case(
        "pool.create", "sre", "", lambda w: nodes.pool_create(actor=w["sre"], name="canary", is_production=False)
    ),
    "controlplane.nodes.services.pools.pool_publish": Case(
        "pool.publish",
        "admin",
        "weekly release",
        lambda w: nodes.pool_publish(actor=w["admin"], pool=w["staging"], version=w["v1"], reason="weekly release"),
    ),
    "controlplane.nodes.services.pools.pool_rollback": Case(
        "pool.rollback",
        "sre",
        "latency regression",
        _publish_twice_then(
            lambda w: nodes.pool_rollback(actor=w["sre"], pool=w["staging"], reason="latency regression")
        ),
    ),
}


def test_every_registered_service_has_a_case():
    import_every_module()
    assert set(MUTATING_SERVICES) == set(CASES), "add a Case for each new mutating service (and only those)"


@pytest.fixture
def world(users):
    legal = legal_whitelist(users["agent"])
    template, (v1, v2) = template_with_versions(users["agent"], temperatures=(0.3, 0.2))
    staging, prod = pools(users["sre"])
    return {**users, "legal": legal, "template": template, "v1": v1, "v2": v2, "staging": staging, "prod": prod}


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(CASES))
def test_service_writes_exactly_one_audit_entry(world, name):
    case = CASES[name]
    world["baseline"] = AuditEntry.objects.count()
    token = bind_request_id(f"req-{name.rsplit('.', 1)[-1]}")
    try:
        result = case.call(world)
    finally:
        token.var.reset(token)
    new = list(AuditEntry.objects.order_by("id")[world["baseline"] :])
    assert len(new) == 1, [e.action for e in new]
    [entry] = new
    assert entry.action == case.action
    assert entry.actor_name == case.actor
    assert entry.request_id == f"req-{name.rsplit('.', 1)[-1]}"
    assert entry.reason == case.reason
    assert entry.target_type and entry.target_id
    assert result is not None


@pytest.mark.django_db
def test_entries_outside_a_request_have_an_empty_request_id(agent):
    templates.template_create(actor=agent, name="offline")
    assert AuditEntry.objects.get(action="template.create").request_id == ""
