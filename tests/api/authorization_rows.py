"""The authorization matrix's table: every REST endpoint and method, the roles allowed to call it, what an allowed
call answers and the data it sends (tests/api/test_authorization_matrix.py runs it for every role)."""

from collections.abc import Callable
from dataclasses import dataclass, field

from django.core.files.uploadedfile import SimpleUploadedFile

from controlplane.accounts.roles import Role
from controlplane.alerts.models import AlertGroup, Silence
from controlplane.impact.models import ImpactRecord
from controlplane.nodes.models import ClientKey
from controlplane.operations.models import ConversationOverride
from controlplane.replays.comparison_models import ReplayComparison
from controlplane.replays.models import ReplayRun
from controlplane.reviews.models import ReviewItem
from controlplane.tuning.models import TuningStudy
from tests.conftest import PASSWORD
from tests.datasets.data import as_csv, easy_rows

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


SHOP = {"name": "shop"}  # the intent dataset of the module's world, with its trained model #1
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


def _review_item(status: str) -> int:
    """The id of the item of that status `review_world` stored (1 where it did not run)."""
    return ReviewItem.objects.filter(status=status).values_list("pk", flat=True).first() or 1


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
    Call("review-item-list", "GET", EVERY_ROLE, 200, data={"status": "pending"}),
    Call(
        "review-item-label",
        "POST",
        WRITERS,
        200,
        lambda: {"pk": _review_item("pending")},
        {"label": "other"},
        writes=True,
    ),
    Call("review-item-undo", "POST", WRITERS, 200, lambda: {"pk": _review_item("labelled")}, writes=True),
    Call("review-dataset-create", "POST", WRITERS, 201, data={"base": "shop", "name": "shop-r2"}, writes=True),
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
