"""Every service registered as mutating writes exactly one audit entry, with actor, request id and reason."""

import importlib
import pkgutil

import pytest

import controlplane
from controlplane.audit.models import AuditEntry
from controlplane.audit.services import MUTATING_SERVICES
from controlplane.lib.request_id import bind_request_id
from controlplane.params.services import templates
from tests.audit.service_cases import CASES
from tests.factories import legal_whitelist, pools, template_with_versions


def import_every_module() -> None:
    """Registration happens at import time, so import the whole project before reading the registry."""
    for module in pkgutil.walk_packages(controlplane.__path__, "controlplane."):
        if ".migrations" not in module.name:
            importlib.import_module(module.name)


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
