"""Every REST endpoint × every role (and anonymous): allowed calls succeed, forbidden ones change nothing."""

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane import api_urls
from controlplane.accounts.roles import Role
from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import AlertRule, AlertRuleVersion
from controlplane.alerts.services.lifecycle import silence_create
from controlplane.audit.models import AuditEntry
from controlplane.catalog.services import model_entry_create
from controlplane.convlogs.services.analyses import log_analysis_create, log_analysis_run
from controlplane.convlogs.services.logs import conversation_log_create
from controlplane.datasets.services.warmup import warmup_dataset_create
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.client_keys import client_key_create
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.replays.comparison_services import replay_comparison_create
from controlplane.replays.services import replay_run_create
from controlplane.reviews.models import ReviewItem
from controlplane.reviews.services import review_item_label
from controlplane.tuning.services import study_create
from tests.advice.builders import window_rows
from tests.api.authorization_rows import (
    ANONYMOUS,
    CONVERSATION_LOG,
    MATRIX,
    Call,
)
from tests.api.conftest import build_world as api_world
from tests.conftest import PASSWORD
from tests.datasets.factories import easy_dataset, train_now
from tests.helpers import state_snapshot
from tests.module_data import module_world_fixtures
from tests.replays.factories import finished_run
from tests.replays.logs import log_lines, store_log
from tests.reviews.factories import ingest, node_in
from tests.reviews.factories import sample as review_sample


def gpu_1_seen_now() -> None:
    """gpu-1 is connected as of the test's time, not as of when the module began (it would read as lost later)."""
    EngineNode.objects.filter(name="gpu-1", is_connected=True).update(last_seen_at=timezone.now())


def matrix_world(users) -> dict:
    """The API tests' world (tests/api/conftest.py) and, for the intent and review rows, dataset `shop` and its
    trained model #1 (a training run costs a moment: trained once here rather than for each of those rows)."""
    world = api_world(users)
    train_now(users["agent"], easy_dataset(users["agent"], "shop", templates_per_label=2), epochs=1)
    return world


# The users and that world, built once for the module's 700 tests (tests/module_data.py); each row's own additions
# below are still built per test.
module_world, users, world = module_world_fixtures(matrix_world, Role.values, before_each=gpu_1_seen_now)


@pytest.fixture(autouse=True)
def review_world(request):
    """For the review rows only: two messages a node of staging sampled, one of them labelled (dataset `shop` is the
    module's)."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    if call is None or not call.name.startswith("review-"):
        return
    world = request.getfixturevalue("world")
    users = request.getfixturevalue("users")
    node = node_in(world["staging"], users["sre"])
    ingest(node, review_sample("is this moisturiser ok for eczema"), review_sample("the cup arrived broken"))
    review_item_label(actor=users["agent"], item=ReviewItem.objects.get(text="the cup arrived broken"), label="other")


@pytest.fixture(autouse=True)
def catalog_world(request):
    """For the model catalog rows only: the entry `tiny`."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    pattern = callspec.params.get("pattern") if callspec else None
    if not (call and call.name.startswith("model-")) and not (pattern and pattern.name.startswith("model-")):
        return
    request.getfixturevalue("world")
    model_entry_create(actor=request.getfixturevalue("users")["admin"], name="tiny", source="/srv/models/tiny")


@pytest.fixture(autouse=True)
def alerts_world(request):
    """For the alerting rows only: the default rules, node gpu-1 lost (an incident) and a silence in effect."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    if call is None or not call.name.startswith(("alert-", "incident-", "silence-")):
        return
    request.getfixturevalue("world")
    install_default_rules(AlertRule, AlertRuleVersion)
    EngineNode.objects.filter(name="gpu-1").update(is_connected=False)
    evaluate()
    silence_create(
        actor=request.getfixturevalue("users")["oncall"], node="gpu-9", duration_minutes=60, reason="maintenance"
    )


@pytest.fixture(autouse=True)
def rollout_world(request):
    """For the rollout rows only: staging (gpu-1, gpu-2 on v2) rolling v1 out through [1 node, 100 %]."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    if call is None or call.name != "pool-rollout":
        return
    world = request.getfixturevalue("world")
    sre = request.getfixturevalue("users")["sre"]
    node_create(actor=sre, name="gpu-2", pool=world["staging"])
    EngineNode.objects.update(is_connected=True, applied_hash=world["v2"].content_hash, applied_version=world["v2"])
    Pool.objects.filter(pk=world["staging"].pk).update(canary_stages=[{"nodes": 1}, {"percent": 100}])
    pool_publish(actor=sre, pool=Pool.objects.get(pk=world["staging"].pk), version=world["v1"], reason="back to v1")


@pytest.fixture(autouse=True)
def client_key_world(request):
    """For the client-key rows only: key web-chat, valid on staging."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    if call is None or not call.name.startswith("client-key-"):
        return
    world = request.getfixturevalue("world")
    client_key_create(actor=request.getfixturevalue("users")["sre"], name="web-chat", pools=[world["staging"]])


@pytest.fixture(autouse=True)
def warmup_world(request):
    """For the warmup rows only: warmup dataset `faq` with its version 1."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    if call is None or not call.name.startswith("warmup-"):
        return
    request.getfixturevalue("world")
    agent = request.getfixturevalue("users")["agent"]
    warmup_dataset_create(actor=agent, name="faq", content="text\nwhere is my order?\n", fmt="csv")


@pytest.fixture(autouse=True)
def advice_world(request):
    """For the suggestion rows only: two minutes of staging's figures with batches idle 30 % of the time."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    if call is None or "suggestion" not in call.name:
        return
    request.getfixturevalue("world")
    window_rows("staging", batch_idle_ratio=0.3)


@pytest.fixture(autouse=True)
def replay_world(request):
    """For the replay rows only: conversation log `festival-log` and one queued replay of it on staging."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    if call is None or not call.name.startswith("replay-"):
        return
    world = request.getfixturevalue("world")
    request.getfixturevalue("settings").CONVERSATION_LOG_DIR = request.getfixturevalue("tmp_path")
    agent = request.getfixturevalue("users")["agent"]
    log = store_log(agent, log_lines(3))
    replay_run_create(actor=agent, pool=world["staging"], log=log, reason="baseline", qps=5)


@pytest.fixture(autouse=True)
def convlog_world(request, tmp_path, settings):
    """For the conversation-log rows only: log `june` (60 short conversations) analysed against staging, and an
    import directory holding june.jsonl."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    pattern = callspec.params.get("pattern") if callspec else None
    names = ("conversation-log", "log-analysis")
    if not (call and call.name.startswith(names)) and not (pattern and pattern.name.startswith(names)):
        return
    world = request.getfixturevalue("world")
    settings.CONVERSATION_LOG_DIR = tmp_path / "stored-logs"
    settings.CONVERSATION_LOG_IMPORT_DIR = str(tmp_path)
    (tmp_path / "june.jsonl").write_bytes(CONVERSATION_LOG * 60)
    agent = request.getfixturevalue("users")["agent"]
    log = conversation_log_create(actor=agent, name="june", filename="june.jsonl", chunks=[CONVERSATION_LOG * 60])
    analysis = log_analysis_create(actor=agent, log=log, pool=Pool.objects.get(pk=world["staging"].pk))
    log_analysis_run(analysis_id=analysis.pk)


@pytest.fixture(autouse=True)
def replay_comparison_world(request):
    """For the run-figure and comparison rows: two finished runs of one log (v1, v2 on staging) and their comparison."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    if call is None or not call.name.startswith(("replay-figure", "replay-comparison")):
        return
    world = request.getfixturevalue("world")
    agent = request.getfixturevalue("users")["agent"]
    runs = [finished_run(actor=agent, pool=world["staging"], version=world[v], n=30) for v in ("v1", "v2")]
    replay_comparison_create(actor=agent, run_ids=[r.pk for r in runs], resamples=100)


@pytest.fixture(autouse=True)
def tuning_world(request):
    """For the tuning rows only: log `festival-log`, pool `canary` (node gpu-7) and a queued study on it."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    if call is None or not call.name.startswith("tuning-"):
        return
    world = request.getfixturevalue("world")
    request.getfixturevalue("settings").CONVERSATION_LOG_DIR = request.getfixturevalue("tmp_path")
    sre = request.getfixturevalue("users")["sre"]
    log = store_log(sre, log_lines(3))
    canary = pool_create(actor=sre, name="canary", is_production=False)
    node_create(actor=sre, name="gpu-7", pool=canary)
    study_create(
        actor=sre,
        pool=canary,
        base_version=world["v2"],
        log=log,
        space=[{"path": "batch.max_size", "type": "int", "low": 4, "high": 16}],
        objective="min_p99",
        replay={"qps": 5, "duration_s": 5},
        budget=2,
        reason="queued study",
    )


def implemented_methods(pattern) -> set[str]:
    view = pattern.callback.cls(**pattern.callback.initkwargs)
    return set(view._allowed_methods()) - {"OPTIONS"}


def test_every_endpoint_and_method_has_a_row():
    routes = {(p.name, m) for p in api_urls.urlpatterns for m in implemented_methods(p)}
    rows = [(c.name, c.method) for c in MATRIX]
    assert len(rows) == len(set(rows)), "a row appears twice"
    assert set(rows) == routes, "add a MATRIX row for each new endpoint or method"


def send(client, call: Call):
    url = reverse(f"api:{call.name}", kwargs=call.kwargs() if callable(call.kwargs) else call.kwargs)
    data = call.data() if callable(call.data) else call.data
    if call.method == "GET":
        return client.get(url, data)
    return getattr(client, call.method.lower())(url, data, format="multipart" if call.multipart else "json")


@pytest.mark.django_db
@pytest.mark.parametrize("role", [*Role.values, ANONYMOUS], ids=[*Role.values, "anonymous"])
@pytest.mark.parametrize("call", MATRIX, ids=[c.id for c in MATRIX])
def test_matrix(world, api_for, call, role):
    before = state_snapshot()
    response = send(api_for(role), call)
    if role in call.allowed:
        assert response.status_code == call.status, response.content[:500]
        expected_entries = before["audit.AuditEntry"] + (1 if call.writes else 0)
        assert AuditEntry.objects.count() == expected_entries
    else:
        assert response.status_code == (401 if role is ANONYMOUS else 403), response.content[:500]
        # The schema and Swagger views render their refusal in their own formats (OpenAPI, HTML).
        if call.name not in {"schema", "docs"}:
            assert response.json()["error"]
        assert state_snapshot() == before


@pytest.mark.django_db
@pytest.mark.parametrize("pattern", api_urls.urlpatterns, ids=[p.name for p in api_urls.urlpatterns])
def test_methods_a_route_does_not_have_get_405_for_every_role(world, api_for, pattern):
    """405 naming the route's methods in `Allow` (not a 403 that reads as "ask for a bigger role");
    anonymous callers are asked to sign in first."""
    implemented = implemented_methods(pattern)
    missing = {"GET", "POST", "PUT", "PATCH", "DELETE"} - implemented
    kwargs = next(c.kwargs for c in MATRIX if c.name == pattern.name)
    kwargs = kwargs() if callable(kwargs) else kwargs
    url = reverse(f"api:{pattern.name}", kwargs=kwargs)
    before = state_snapshot()
    for role in [*Role.values, ANONYMOUS]:
        for method in sorted(missing):
            response = getattr(api_for(role), method.lower())(url, {"name": "x"}, format="json")
            if role is ANONYMOUS and pattern.name != "token-issue":
                assert response.status_code == 401, (method, role, response.status_code)
                continue
            assert response.status_code == 405, (method, role, response.status_code, response.content[:300])
            assert {m.strip() for m in response["Allow"].split(",")} >= implemented, response["Allow"]
            if pattern.name not in {"schema", "docs"}:
                assert response.json()["error"] == f'Method "{method}" not allowed.'
    assert state_snapshot() == before


@pytest.mark.django_db
def test_me_lists_the_actions_of_each_role(api_for):
    def allowed(role):
        return set(api_for(role).get(reverse("api:me")).json()["allowed_actions"])

    assert allowed(Role.ONCALL) == {"view", "alert.respond"}
    assert allowed(Role.AGENT) == {
        "view",
        "template.write",
        "whitelist.write",
        "override.set",
        "intent.train",
        "warmup.write",
        "convlog.write",
        "replay.run",
    }
    assert {"pool.publish", "pool.production_override", "convlog.import", "tuning.run"} <= allowed(Role.SRE)
    assert "user.manage" not in allowed(Role.SRE)
    assert "user.manage" in allowed(Role.ADMIN)


@pytest.mark.django_db
def test_token_authenticates_and_deactivation_revokes_it(users, api_for):
    token = APIClient().post(reverse("api:token-issue"), {"username": "agent", "password": PASSWORD}).json()["token"]
    client = APIClient(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get(reverse("api:me")).json()["role"] == "agent"
    patch = {"is_active": False, "reason": "left the team"}
    assert (
        api_for(Role.ADMIN).patch(reverse("api:user-detail", args=["agent"]), patch, format="json").status_code == 200
    )
    assert client.get(reverse("api:me")).status_code == 401


@pytest.mark.django_db
def test_wrong_password_gets_401_and_no_token(users):
    response = APIClient().post(reverse("api:token-issue"), {"username": "agent", "password": "wrong"})
    assert response.status_code == 401
    assert response.json()["code"] == "bad_credentials"
    assert not AuditEntry.objects.filter(action="user.token_issue").exists()
