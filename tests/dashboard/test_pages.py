"""Every dashboard page for every role: who may read it, who may post to it, and that refusals change nothing."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from controlplane.accounts.roles import Role
from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import AlertGroup, AlertRule, AlertRuleVersion
from controlplane.alerts.services.lifecycle import silence_create
from controlplane.audit.models import AuditEntry
from controlplane.catalog.services import model_entry_create
from controlplane.datasets.services.releases import intent_model_publish
from controlplane.datasets.services.warmup import pool_warmup_assign, warmup_dataset_create
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_publish
from controlplane.operations.services import override_set
from controlplane.params.services.templates import template_version_create
from controlplane.reviews.models import ReviewItem
from controlplane.reviews.services import review_item_label
from tests.datasets.data import as_csv, easy_rows
from tests.datasets.factories import easy_dataset, train_now
from tests.factories import legal_whitelist, pools, ran_healthy, template_with_versions
from tests.module_data import module_world_fixtures
from tests.reviews.factories import ingest
from tests.reviews.factories import sample as review_sample

pytestmark = pytest.mark.django_db

ALL = set(Role.values)
WARMUP_CSV = b"text,intent\nwhere is my order?,order_status\n"
WRITERS = {Role.AGENT, Role.SRE, Role.ADMIN}
OPERATORS = {Role.SRE, Role.ADMIN}
RESPONDERS = {Role.ONCALL, Role.SRE, Role.ADMIN}


# The world below, built once for the module (tests/module_data.py): a training run and an evaluation a test cost
# half a second, over 270 tests.
module_world, users, world = module_world_fixtures(lambda users: build_world(users), Role.values)


def build_world(users):
    sre = users[Role.SRE]
    legal_whitelist(sre)
    _, versions = template_with_versions(sre, name="chat", temperatures=(0.3, 0.2))
    staging, prod = pools(sre)
    pool_publish(actor=sre, pool=staging, version=versions[0], reason="first")
    pool_publish(actor=sre, pool=staging, version=versions[1], reason="second")
    # Intent dataset `shop` with model #1 (trained, above the floor) running on prod-main.
    model = train_now(sre, easy_dataset(sre, "shop", templates_per_label=2), epochs=1)
    intent_model_publish(actor=sre, pool=prod, intent_model=model, reason="first model")
    override = override_set(actor=sre, pool=None, conversation="conv-1", tier="strict", reason="refund dispute")
    # Warmup dataset `faq` (version 1), the warmup of prod-main.
    faq = warmup_dataset_create(actor=sre, name="faq", content=WARMUP_CSV, fmt="csv")
    pool_warmup_assign(actor=sre, pool=prod, version=faq.versions.get(), reason="first warmup")
    gpu1, _ = node_create(actor=sre, name="gpu-1", pool=staging)
    ran_healthy(gpu1, versions[1])  # so production may get v2
    # Two messages gpu-1 sampled for review, one of them labelled.
    ingest(gpu1, review_sample("is this ok for eczema"), review_sample("the cup arrived broken"))
    review_item_label(
        actor=users[Role.AGENT], item=ReviewItem.objects.get(text="the cup arrived broken"), label="other"
    )
    # An incident (node gpu-lost of prod-main lost) and a silence in effect, for the on-call page.
    install_default_rules(AlertRule, AlertRuleVersion)
    lost, _ = node_create(actor=sre, name="gpu-lost", pool=prod)
    EngineNode.objects.filter(pk=lost.pk).update(connected_at=lost.created_at)
    evaluate()
    silence = silence_create(actor=sre, node="gpu-9", duration_minutes=60, reason="maintenance")
    model_entry_create(actor=sre, name="tiny", source="/srv/models/tiny")
    return {
        "staging": staging,
        "prod": prod,
        "versions": versions,
        "override": override,
        "incident": AlertGroup.objects.get(),
        "silence": silence,
    }


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# (url name, kwargs, roles that may GET it)
PAGES = [
    ("dashboard:overview", {}, ALL),
    ("dashboard:templates", {}, ALL),
    ("dashboard:template-detail", {"name": "chat"}, ALL),
    ("dashboard:template-edit", {"name": "chat"}, ALL),
    ("dashboard:template-diff", {"name": "chat"}, ALL),
    ("dashboard:version-detail", {"name": "chat", "number": 1}, ALL),
    ("dashboard:version-export", {"name": "chat", "number": 1}, ALL),
    ("dashboard:whitelists", {}, ALL),
    ("dashboard:models", {}, ALL),
    ("dashboard:model-detail", {"name": "tiny"}, ALL),
    ("dashboard:pools", {}, ALL),
    ("dashboard:pool-detail", {"name": "staging"}, ALL),
    ("dashboard:pool-rollback", {"name": "staging"}, OPERATORS),
    ("dashboard:node-detail", {"name": "gpu-1"}, ALL),
    ("dashboard:overrides", {}, ALL),
    ("dashboard:intents", {}, ALL),
    ("dashboard:intent-dataset", {"name": "shop"}, ALL),
    ("dashboard:intent-model", {"name": "shop", "number": 1}, ALL),
    ("dashboard:review-queue", {}, ALL),
    ("dashboard:warmup", {}, ALL),
    ("dashboard:warmup-dataset", {"name": "faq"}, ALL),
    ("dashboard:warmup-version", {"name": "faq", "number": 1}, ALL),
    ("dashboard:oncall", {}, ALL),
    ("dashboard:alert-rules", {}, ALL),
    ("dashboard:alert-rule", {"name": "p99-latency"}, ALL),
    ("dashboard:runbooks", {}, ALL),
    ("dashboard:runbook", {"slug": "batch-timeout-exceeded"}, ALL),
    ("dashboard:audit", {}, ALL),
    ("dashboard:impact-records", {}, ALL),
    ("dashboard:param-field", {"path": "temperature.strict"}, ALL),
    ("dashboard:users", {}, {Role.ADMIN}),
]


@pytest.mark.parametrize("role", Role.values)
@pytest.mark.parametrize(("name", "kwargs", "allowed"), PAGES, ids=[p[0] for p in PAGES])
def test_page_read_access(world, users, role, name, kwargs, allowed):
    response = client_for(users[role]).get(reverse(name, kwargs=kwargs))
    assert response.status_code == (200 if role in allowed else 403)


@pytest.mark.parametrize(("name", "kwargs"), [(p[0], p[1]) for p in PAGES])
def test_anonymous_is_sent_to_login(world, name, kwargs):
    response = Client().get(reverse(name, kwargs=kwargs))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("dashboard:login"))


# (url name, kwargs, form data, roles that may post)
WRITES = [
    ("dashboard:templates", {}, {"name": "new-template"}, WRITERS),
    (
        "dashboard:template-edit",
        {"name": "chat"},
        {"text": "inference_params:\n  batch:\n    timeout_ms: 40\n", "format": "yaml", "base_version": 2},
        WRITERS,
    ),
    ("dashboard:whitelists", {}, {"name": "vip", "scenarios": "vip"}, WRITERS),
    ("dashboard:whitelist-edit", {"name": "legal"}, {"scenarios": "legal", "base_version": 1}, WRITERS),
    ("dashboard:models", {}, {"name": "qwen3-8b", "source": "Qwen/Qwen3-8B"}, OPERATORS),
    (
        "dashboard:model-detail",
        {"name": "tiny"},
        {"source": "/srv/models/tiny", "revision": "v2", "reason": "r"},
        OPERATORS,
    ),
    ("dashboard:pools", {}, {"name": "long-context", "description": "x"}, OPERATORS),
    ("dashboard:pool-publish", {"name": "prod-main"}, {"version": "chat:2", "reason": "ok"}, OPERATORS),
    ("dashboard:pool-rollback", {"name": "staging"}, {"version": "chat:1", "reason": "regression"}, OPERATORS),
    ("dashboard:node-command", {"name": "gpu-1"}, {"op": "cleanup", "reason": "fragmentation"}, OPERATORS),
    ("dashboard:pool-cleanup", {"name": "staging"}, {"reason": "weekly cleanup"}, OPERATORS),
    (
        "dashboard:pool-canary",
        {"name": "staging"},
        {"stages": "1, 25%, 100%", "analysis_window_s": 120, "reason": "one node first"},
        OPERATORS,
    ),
    (
        "dashboard:overrides",
        {},
        {"pool": "staging", "conversation": "conv-2", "tier": "normal", "reason": "tone", "expires_in_minutes": 30},
        WRITERS,
    ),
    ("dashboard:override-revoke", {"pk": 0}, {"reason": "resolved"}, WRITERS),
    (
        "dashboard:intents",
        {},
        lambda: {"name": "uploaded", "file": SimpleUploadedFile("rows.csv", as_csv(easy_rows(2)))},
        WRITERS,
    ),
    ("dashboard:intent-dataset", {"name": "shop"}, {"epochs": 1}, WRITERS),
    ("dashboard:intent-publish", {"name": "shop", "number": 1}, {"pool": "staging", "reason": "better"}, OPERATORS),
    ("dashboard:intent-builtin", {"name": "prod-main"}, {"reason": "regression"}, OPERATORS),
    ("dashboard:review-dataset", {}, {"base": "shop", "name": "shop-r2"}, WRITERS),
    (
        "dashboard:warmup",
        {},
        lambda: {"name": "uploaded", "source": "upload", "file": SimpleUploadedFile("warmup.csv", WARMUP_CSV)},
        WRITERS,
    ),
    (
        "dashboard:warmup-dataset",
        {"name": "faq"},
        lambda: {
            "base_version": 1,
            "source": "conversation_log",
            "top_n": 10,
            "file": SimpleUploadedFile("log.jsonl", b'{"messages": [{"role": "user", "content": "hi"}]}'),
        },
        WRITERS,
    ),
    ("dashboard:warmup-assign", {"name": "faq"}, {"pool": "staging", "version": 1, "reason": "cold starts"}, OPERATORS),
    ("dashboard:users", {}, {"username": "newbie", "password": "long-enough-pass", "role": "oncall"}, {Role.ADMIN}),
    ("dashboard:user-update", {"name": "x"}, {"role": "sre", "is_active": "on"}, {Role.ADMIN}),
    ("dashboard:incident-ack", {"pk": 0}, {"note": "on it"}, RESPONDERS),
    (
        "dashboard:silence-create",
        {},
        {"rule": "node-lost", "pool": "prod-main", "node": "", "duration_minutes": 60, "reason": "maintenance"},
        RESPONDERS,
    ),
    ("dashboard:silence-expire", {"pk": 0}, {"reason": "done"}, RESPONDERS),
    (
        "dashboard:alert-rule",
        {"name": "p99-latency"},
        {
            "base_version": 1,
            "metric": "latency_p99_s",
            "scope": "node",
            "comparison": "gt",
            "warn": 1.5,
            "critical": 2.0,
            "for_s": 10,
            "runbook": "p99-latency",
            "summary": "P99 above the line",
            "is_enabled": "on",
        },
        OPERATORS,
    ),
]


@pytest.mark.parametrize("role", Role.values)
@pytest.mark.parametrize(("name", "kwargs", "data", "allowed"), WRITES, ids=[w[0] for w in WRITES])
def test_page_writes(world, users, role, name, kwargs, data, allowed):
    if name == "dashboard:user-update":
        kwargs = {"username": Role.ONCALL}
    if name == "dashboard:override-revoke":
        kwargs = {"pk": world["override"].pk}
    if name == "dashboard:incident-ack":
        kwargs = {"pk": world["incident"].pk}
    if name == "dashboard:silence-expire":
        kwargs = {"pk": world["silence"].pk}
    if name in {"dashboard:node-command", "dashboard:pool-cleanup"}:
        EngineNode.objects.filter(name="gpu-1").update(is_connected=True, last_seen_at=timezone.now())
    before = AuditEntry.objects.count()
    data = data() if callable(data) else data  # a fresh upload each time: a file is read once
    response = client_for(users[role]).post(reverse(name, kwargs=kwargs), data)
    if role in allowed:
        assert response.status_code == 302, response.content[:500]
        assert AuditEntry.objects.count() == before + 1
    else:
        assert response.status_code == 403
        assert AuditEntry.objects.count() == before


def test_editor_rejects_invalid_document_and_keeps_text(world, users):
    client = client_for(users[Role.AGENT])
    text = "inference_params:\n  temperature:\n    strict: 5\n"
    response = client.post(
        reverse("dashboard:template-edit", kwargs={"name": "chat"}), {"text": text, "format": "yaml", "base_version": 2}
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert "temperature.strict" in body and "must be between 0 and 2, got 5" in body
    assert "strict: 5" in body


def test_editor_on_stale_base_shows_conflict_and_saves_nothing(world, users):
    client = client_for(users[Role.AGENT])
    response = client.post(
        reverse("dashboard:template-edit", kwargs={"name": "chat"}),
        {"text": "inference_params:\n  batch:\n    timeout_ms: 45\n", "format": "yaml", "base_version": 1},
    )
    assert response.status_code == 409
    assert "someone saved a newer version first" in response.content.decode()
    assert world["versions"][0].template.versions.count() == 2


def test_production_publish_without_staging_is_refused_inline(world, users):
    sre = users[Role.SRE]
    v3 = template_version_create(
        actor=sre, template=world["versions"][0].template, document={"inference_params": {}}, base_number=2
    )
    response = client_for(sre).post(
        reverse("dashboard:pool-publish", kwargs={"name": "prod-main"}), {"version": v3.ref, "reason": "go"}
    )
    assert response.status_code == 400
    assert "chat v3 has not run on a non-production pool yet: it was never published to a non-production pool" in (
        response.content.decode()
    )
    assert Pool.objects.get(name="prod-main").desired_version is None


def test_bad_version_number_is_an_error_page_not_a_traceback(world, users):
    response = client_for(users[Role.ONCALL]).get(
        reverse("dashboard:template-diff", kwargs={"name": "chat"}) + "?from=abc&to=2"
    )
    assert response.status_code == 400
    assert "version: must be a version number" in response.content.decode()


def test_model_pages_name_the_field_of_a_refused_value_and_keep_trust_for_admins(world, users):
    sre = client_for(users[Role.SRE])
    response = sre.post(reverse("dashboard:models"), {"name": "evil", "source": "--trust-remote-code.x"})
    assert response.status_code == 400
    assert "source: &#x27;--trust-remote-code.x&#x27; starts with &#x27;-&#x27;" in response.content.decode()
    response = sre.post(reverse("dashboard:models"), {"name": "x", "source": "org/x", "trust_remote_code": "on"})
    assert response.status_code == 400 and "only an admin" in response.content.decode()
    # The SRE's page shows the grant but cannot change it.
    assert 'data-testid="trust-remote-code"' not in sre.get(reverse("dashboard:models")).content.decode()
    admin = client_for(users[Role.ADMIN])
    assert 'data-testid="trust-remote-code"' in admin.get(reverse("dashboard:models")).content.decode()
