"""Every REST endpoint × every role (and anonymous): allowed calls succeed, forbidden ones change nothing."""

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient

from controlplane import api_urls
from controlplane.accounts.roles import Role
from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import AlertGroup, AlertRule, AlertRuleVersion, Silence
from controlplane.alerts.services.lifecycle import silence_create
from controlplane.audit.models import AuditEntry
from controlplane.catalog.services import model_entry_create
from controlplane.convlogs.services.analyses import log_analysis_create, log_analysis_run
from controlplane.convlogs.services.logs import conversation_log_create
from controlplane.datasets.services.warmup import warmup_dataset_create
from controlplane.impact.models import ImpactRecord
from controlplane.nodes.models import ClientKey, EngineNode, Pool
from controlplane.nodes.services.client_keys import client_key_create
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.operations.models import ConversationOverride
from controlplane.replays.comparison_models import ReplayComparison
from controlplane.replays.comparison_services import replay_comparison_create
from controlplane.replays.models import ReplayRun
from controlplane.replays.services import replay_run_create
from controlplane.tuning.models import TuningStudy
from controlplane.tuning.services import study_create
from tests.advice.builders import window_rows
from tests.conftest import PASSWORD
from tests.datasets.data import as_csv, easy_rows
from tests.datasets.factories import easy_dataset, train_now
from tests.helpers import state_snapshot
from tests.replays.factories import finished_run
from tests.replays.logs import log_lines, store_log

ANONYMOUS = None
EVERY_ROLE = frozenset(Role.values)
PUBLIC = EVERY_ROLE | {ANONYMOUS}
WRITERS = frozenset({Role.AGENT, Role.SRE, Role.ADMIN})  # template.write / whitelist.write
OPERATORS = frozenset({Role.SRE, Role.ADMIN})  # pool.write / pool.publish / pool.rollback
ADMINS = frozenset({Role.ADMIN})  # user.manage

DOCUMENT = {"inference_params": {"temperature": {"strict": 0.25}}}


@dataclass(frozen=True)
class Call:
    name: str
    method: str
    allowed: frozenset
    status: int
    kwargs: dict | Callable[[], dict] = field(default_factory=dict)  # a callable looks up ids made by `world`
    data: object = None  # query parameters for GET, the body otherwise; a callable builds a fresh one
    multipart: bool = False
    writes: bool = False  # an allowed call appends exactly one audit entry

    @property
    def id(self) -> str:
        return f"{self.name}:{self.method}"


def import_upload() -> dict:
    text = b"inference_params:\n  temperature:\n    strict: 0.25\n"
    return {"file": SimpleUploadedFile("chat.yaml", text), "base_version": "2"}


CHAT = {"name": "chat"}
P99 = {"name": "p99-latency"}  # a default alert rule
RESPONDERS = frozenset({Role.ONCALL, Role.SRE, Role.ADMIN})  # alert.respond


def _first(model) -> int:
    """The id `alerts_world` made (1 where the fixture did not run: a refused method never reaches the row)."""
    return model.objects.order_by("pk").values_list("pk", flat=True).first() or 1


SHOP = {"name": "shop"}  # the intent dataset `intent_world` adds
TINY = {"name": "tiny"}  # the model catalog entry `catalog_world` adds
FAQ = {"name": "faq"}  # the warmup dataset `warmup_world` adds
WARMUP_LOG = '{"messages": [{"role": "user", "content": "where is my order?"}]}\n'
JUNE = {"name": "june"}  # the conversation log `convlog_world` adds, with its analysis
CONVERSATION_LOG = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'


def _analysis() -> dict:
    from controlplane.convlogs.models import LogAnalysis

    return {"name": "june", "pk": LogAnalysis.objects.values_list("pk", flat=True).first() or 1}


def log_upload() -> dict:
    return {"name": "fresh-log", "file": SimpleUploadedFile("log.jsonl", CONVERSATION_LOG * 30)}


MATRIX: tuple[Call, ...] = (
    Call("token-issue", "POST", PUBLIC, 201, data={"username": "oncall", "password": PASSWORD}, writes=True),
    Call("me", "GET", EVERY_ROLE, 200),
    Call("user-list", "GET", ADMINS, 200),
    Call(
        "user-list",
        "POST",
        ADMINS,
        201,
        data={"username": "newbie", "password": PASSWORD, "role": "oncall"},
        writes=True,
    ),
    Call("user-detail", "GET", ADMINS, 200, {"username": "oncall"}),
    Call(
        "user-detail", "PATCH", ADMINS, 200, {"username": "oncall"}, {"role": "sre", "reason": "trained"}, writes=True
    ),
    Call("field-list", "GET", EVERY_ROLE, 200),
    Call("document-validate", "POST", EVERY_ROLE, 200, data={"document": DOCUMENT}),
    Call("template-list", "GET", EVERY_ROLE, 200),
    Call("template-list", "POST", WRITERS, 201, data={"name": "fresh"}, writes=True),
    Call("template-detail", "GET", EVERY_ROLE, 200, CHAT),
    Call("template-version-list", "GET", EVERY_ROLE, 200, CHAT),
    Call("template-version-list", "POST", WRITERS, 201, CHAT, {"base_version": 2, "document": DOCUMENT}, writes=True),
    Call("template-import", "POST", WRITERS, 201, CHAT, import_upload, multipart=True, writes=True),
    Call("template-diff", "GET", EVERY_ROLE, 200, CHAT, {"from": 1, "to": 2}),
    Call("template-version-detail", "GET", EVERY_ROLE, 200, {"name": "chat", "number": 1}),
    Call(
        "template-version-explain",
        "POST",
        EVERY_ROLE,
        200,
        {"name": "chat", "number": 1},
        data={"message": "我付了¥299.00怎么还显示未支付"},
    ),
    Call("template-version-export", "GET", EVERY_ROLE, 200, {"name": "chat", "number": 1}, {"format": "json"}),
    Call("model-list", "GET", EVERY_ROLE, 200),
    Call(
        "model-list",
        "POST",
        OPERATORS,
        201,
        data={"name": "qwen3-8b", "source": "Qwen/Qwen3-8B", "revision": "main"},
        writes=True,
    ),
    Call("model-detail", "GET", EVERY_ROLE, 200, TINY),
    Call("model-detail", "PATCH", OPERATORS, 200, TINY, {"revision": "v2", "reason": "retrained"}, writes=True),
    Call("whitelist-list", "GET", EVERY_ROLE, 200),
    Call("whitelist-list", "POST", WRITERS, 201, data={"name": "vip", "scenarios": ["vip"]}, writes=True),
    Call("whitelist-detail", "GET", EVERY_ROLE, 200, {"name": "legal"}),
    Call("whitelist-version-list", "GET", EVERY_ROLE, 200, {"name": "legal"}),
    Call(
        "whitelist-version-list",
        "POST",
        WRITERS,
        201,
        {"name": "legal"},
        {"base_version": 1, "scenarios": ["legal", "contracts"]},
        writes=True,
    ),
    Call("pool-list", "GET", EVERY_ROLE, 200),
    Call("pool-list", "POST", OPERATORS, 201, data={"name": "canary", "is_production": False}, writes=True),
    Call("pool-detail", "GET", EVERY_ROLE, 200, {"name": "staging"}),
    Call("pool-release-list", "GET", EVERY_ROLE, 200, {"name": "staging"}),
    Call(
        "pool-publish",
        "POST",
        OPERATORS,
        201,
        {"name": "staging"},
        {"template": "chat", "version": 1, "reason": "back to v1"},
        writes=True,
    ),
    Call("pool-rollback", "POST", OPERATORS, 201, {"name": "staging"}, {"reason": "regression"}, writes=True),
    Call("pool-rollback-preview", "GET", EVERY_ROLE, 200, {"name": "staging"}),
    Call("pool-suggestions", "GET", EVERY_ROLE, 200, {"name": "staging"}),
    Call("pool-suggestion-apply", "POST", WRITERS, 201, {"name": "staging"}, {"suggestion": "batch-idle"}, writes=True),
    Call("template-suggestions", "GET", EVERY_ROLE, 200, CHAT),
    Call(
        "template-suggestion-apply",
        "POST",
        WRITERS,
        201,
        CHAT,
        {"pool": "staging", "suggestion": "batch-idle"},
        writes=True,
    ),
    Call("replay-list", "GET", EVERY_ROLE, 200),
    Call(
        "replay-list",
        "POST",
        WRITERS,
        201,
        data={"pool": "staging", "log": "festival-log", "reason": "baseline", "qps": 5},
        writes=True,
    ),
    Call("replay-detail", "GET", EVERY_ROLE, 200, lambda: {"pk": _first(ReplayRun)}),
    Call("replay-cancel", "POST", WRITERS, 200, lambda: {"pk": _first(ReplayRun)}, {"reason": "wrong"}, writes=True),
    Call("replay-request-list", "GET", EVERY_ROLE, 200, lambda: {"pk": _first(ReplayRun)}),
    Call("replay-request-export", "GET", EVERY_ROLE, 200, lambda: {"pk": _first(ReplayRun)}, {"format": "jsonl"}),
    Call("tuning-study-list", "GET", EVERY_ROLE, 200),
    Call(
        "tuning-study-list",
        "POST",
        OPERATORS,
        201,
        data={
            "pool": "staging",
            "template": "chat",
            "base_version": 2,
            "log": "festival-log",
            "space": [{"path": "batch.max_size", "type": "int", "low": 4, "high": 16}],
            "objective": "min_p99",
            "replay": {"qps": 5, "duration_s": 5},
            "budget": 3,
            "reason": "batch size for the festival",
        },
        writes=True,
    ),
    Call("tuning-study-detail", "GET", EVERY_ROLE, 200, lambda: {"pk": _first(TuningStudy)}),
    Call(
        "tuning-study-cancel", "POST", OPERATORS, 200, lambda: {"pk": _first(TuningStudy)}, {"reason": "x"}, writes=True
    ),
    Call("impact-record-list", "GET", EVERY_ROLE, 200, data={"pool": "staging", "kind": "publish"}),
    Call("impact-record-detail", "GET", EVERY_ROLE, 200, lambda: {"pk": _first(ImpactRecord)}),
    Call("audit-list", "GET", EVERY_ROLE, 200),
    Call("audit-export", "GET", EVERY_ROLE, 200),
    Call("pool-rollout", "GET", EVERY_ROLE, 200, {"name": "staging"}),
    Call(
        "pool-rollout", "POST", OPERATORS, 200, {"name": "staging"}, {"action": "pause", "reason": "look"}, writes=True
    ),
    Call("pool-canary", "GET", EVERY_ROLE, 200, {"name": "staging"}),
    Call(
        "pool-canary",
        "PATCH",
        OPERATORS,
        200,
        {"name": "staging"},
        {"canary_stages": [{"nodes": 1}, {"percent": 100}], "analysis_window_s": 120, "reason": "one node first"},
        writes=True,
    ),
    Call("pool-gate", "GET", EVERY_ROLE, 200, {"name": "prod-main"}, {"template": "chat", "version": 2}),
    Call("pool-cleanup", "POST", OPERATORS, 201, {"name": "staging"}, {"reason": "fragmentation"}, writes=True),
    Call("client-key-list", "GET", EVERY_ROLE, 200, data={"pool": "staging"}),
    Call(
        "client-key-list",
        "POST",
        OPERATORS,
        201,
        data={"name": "web-chat-2", "pools": ["staging"], "business_tags": ["order"]},
        writes=True,
    ),
    Call(
        "client-key-revoke",
        "POST",
        OPERATORS,
        200,
        lambda: {"pk": ClientKey.objects.order_by("pk").values_list("pk", flat=True).first() or 1},
        {"reason": "leaked"},
        writes=True,
    ),
    Call("node-list", "GET", EVERY_ROLE, 200),
    Call("node-list", "POST", OPERATORS, 201, data={"name": "gpu-2", "pool": "staging"}, writes=True),
    Call("node-detail", "GET", EVERY_ROLE, 200, {"name": "gpu-1"}),
    Call("node-token-rotate", "POST", OPERATORS, 201, {"name": "gpu-1"}, {"reason": "routine"}, writes=True),
    Call("node-token-revoke", "POST", OPERATORS, 200, {"name": "gpu-1"}, {"reason": "host lost"}, writes=True),
    Call("node-command-list", "GET", EVERY_ROLE, 200, {"name": "gpu-1"}),
    Call(
        "node-command-list", "POST", OPERATORS, 201, {"name": "gpu-1"}, {"op": "drain", "reason": "maint"}, writes=True
    ),
    Call("override-list", "GET", EVERY_ROLE, 200, data={"pool": "staging"}),
    Call(
        "override-list",
        "POST",
        WRITERS,
        201,
        data={"pool": "staging", "conversation": "conv-2", "tier": "strict", "reason": "refund dispute"},
        writes=True,
    ),
    Call(
        "override-revoke",
        "POST",
        WRITERS,
        200,
        lambda: {"pk": ConversationOverride.objects.get(conversation_id="conv-1").pk},
        {"reason": "resolved"},
        writes=True,
    ),
    Call("pool-degradation", "GET", EVERY_ROLE, 200, {"name": "staging"}),
    Call(
        "pool-degradation", "POST", OPERATORS, 200, {"name": "staging"}, {"active": True, "reason": "peak"}, writes=True
    ),
    Call("intent-dataset-list", "GET", EVERY_ROLE, 200),
    Call(
        "intent-dataset-list",
        "POST",
        WRITERS,
        201,
        data=lambda: {"name": "fresh", "format": "csv", "content": as_csv(easy_rows(2)).decode()},
        writes=True,
    ),
    Call("intent-dataset-detail", "GET", EVERY_ROLE, 200, SHOP),
    Call("intent-model-list", "GET", EVERY_ROLE, 200, SHOP),
    Call("intent-model-list", "POST", WRITERS, 201, SHOP, {"epochs": 1}, writes=True),
    Call("intent-model-detail", "GET", EVERY_ROLE, 200, {"name": "shop", "number": 1}),
    Call("intent-release-list", "GET", EVERY_ROLE, 200, data={"pool": "staging"}),
    Call(
        "intent-release-list",
        "POST",
        OPERATORS,
        201,
        data={"pool": "staging", "dataset": "shop", "number": 1, "reason": "better on refunds"},
        writes=True,
    ),
    Call("conversation-log-list", "GET", EVERY_ROLE, 200),
    Call("conversation-log-list", "POST", WRITERS, 201, data=log_upload, multipart=True, writes=True),
    Call(
        "conversation-log-import",
        "POST",
        OPERATORS,
        201,
        data={"name": "imported", "path": "june.jsonl"},
        writes=True,
    ),
    Call("conversation-log-detail", "GET", EVERY_ROLE, 200, JUNE),
    Call("log-analysis-list", "GET", EVERY_ROLE, 200, JUNE),
    Call("log-analysis-list", "POST", WRITERS, 201, JUNE, {"pool": "staging"}, writes=True),
    Call("log-analysis-detail", "GET", EVERY_ROLE, 200, _analysis),
    Call("log-analysis-apply", "POST", WRITERS, 201, _analysis, {"suggestions": ["first_turn_cap"]}, writes=True),
    Call("warmup-dataset-list", "GET", EVERY_ROLE, 200),
    Call(
        "warmup-dataset-list",
        "POST",
        WRITERS,
        201,
        data=lambda: {"name": "fresh", "format": "csv", "content": "text,intent\n我的订单到哪了,order_status\n"},
        writes=True,
    ),
    Call("warmup-dataset-detail", "GET", EVERY_ROLE, 200, FAQ),
    Call("warmup-version-list", "GET", EVERY_ROLE, 200, FAQ),
    Call(
        "warmup-version-list",
        "POST",
        WRITERS,
        201,
        FAQ,
        {"base_version": 1, "source": "conversation_log", "format": "jsonl", "content": WARMUP_LOG, "top_n": 10},
        writes=True,
    ),
    Call("warmup-version-detail", "GET", EVERY_ROLE, 200, {"name": "faq", "number": 1}),
    Call("warmup-assignment-list", "GET", EVERY_ROLE, 200, data={"pool": "staging"}),
    Call(
        "warmup-assignment-list",
        "POST",
        OPERATORS,
        201,
        data={"pool": "staging", "dataset": "faq", "number": 1, "reason": "warm up after cold starts"},
        writes=True,
    ),
    Call("metric-history", "GET", EVERY_ROLE, 200, {"scope": "pool", "name": "staging"}, {"metric": "qps"}),
    Call("alert-rule-list", "GET", EVERY_ROLE, 200),
    Call(
        "alert-rule-list",
        "POST",
        OPERATORS,
        201,
        data={
            "name": "kv-cache-full",
            "metric": "kv_cache_usage",
            "scope": "node",
            "comparison": "gt",
            "warn": 0.9,
            "for_s": 30,
            "runbook": "memory-fragmentation",
            "summary": "KV cache nearly full",
        },
        writes=True,
    ),
    Call("alert-rule-detail", "GET", EVERY_ROLE, 200, P99),
    Call("alert-rule-version-list", "GET", EVERY_ROLE, 200, P99),
    Call("alert-rule-version-list", "POST", OPERATORS, 201, P99, {"base_version": 1, "warn": 1.5}, writes=True),
    Call("alert-list", "GET", EVERY_ROLE, 200, data={"state": "all"}),
    Call("alert-no-source-list", "GET", EVERY_ROLE, 200),
    Call("incident-list", "GET", EVERY_ROLE, 200),
    Call("incident-detail", "GET", EVERY_ROLE, 200, lambda: {"pk": _first(AlertGroup)}),
    Call("incident-ack", "POST", RESPONDERS, 200, lambda: {"pk": _first(AlertGroup)}, {"note": "on it"}, writes=True),
    Call("silence-list", "GET", EVERY_ROLE, 200),
    Call(
        "silence-list",
        "POST",
        RESPONDERS,
        201,
        data={"pool": "staging", "duration_minutes": 60, "reason": "deploying"},
        writes=True,
    ),
    Call("silence-expire", "POST", RESPONDERS, 200, lambda: {"pk": _first(Silence)}, {"reason": "done"}, writes=True),
    Call("replay-figures", "GET", EVERY_ROLE, 200, lambda: {"pk": _first(ReplayRun)}),
    Call("replay-figures-export", "GET", EVERY_ROLE, 200, lambda: {"pk": _first(ReplayRun)}, {"format": "csv"}),
    Call(
        "replay-figure-requests",
        "GET",
        EVERY_ROLE,
        200,
        lambda: {"pk": _first(ReplayRun)},
        {"figure": "latency.e2e_s.p99"},
    ),
    Call("replay-comparison-list", "GET", EVERY_ROLE, 200),
    Call(
        "replay-comparison-list",
        "POST",
        WRITERS,
        201,
        data=lambda: {
            "runs": list(ReplayRun.objects.filter(status="succeeded").order_by("pk").values_list("pk", flat=True)),
            "resamples": 100,
        },
        writes=True,
    ),
    Call("replay-comparison-detail", "GET", EVERY_ROLE, 200, lambda: {"pk": _first(ReplayComparison)}),
    Call("replay-comparison-export", "GET", EVERY_ROLE, 200, lambda: {"pk": _first(ReplayComparison)}),
    # The API description is for signed-in users only, like every other page (SERVE_PERMISSIONS).
    Call("schema", "GET", EVERY_ROLE, 200),
    Call("docs", "GET", EVERY_ROLE, 200),
)


@pytest.fixture(autouse=True)
def intent_world(request):
    """For the intent rows only (a training run costs a moment): dataset `shop` and its trained model #1."""
    callspec = getattr(request.node, "callspec", None)
    call = callspec.params.get("call") if callspec else None
    if call is None or not call.name.startswith("intent-"):
        return
    request.getfixturevalue("world")
    agent = request.getfixturevalue("users")["agent"]
    train_now(agent, easy_dataset(agent, "shop", templates_per_label=2), epochs=1)


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
