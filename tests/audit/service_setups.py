"""The setups the audit cases run in: each calls a service after putting the world in the state it needs (a
node, a published pool, a trained model, a log ...), and returns what it returned."""

import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from django.test import override_settings
from django.utils import timezone

from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import AlertGroup, AlertRule, AlertRuleVersion
from controlplane.alerts.services import lifecycle as alert_lifecycle
from controlplane.audit.models import AuditEntry
from controlplane.catalog import services as catalog
from controlplane.convlogs.services import logs as conversation_logs
from controlplane.datasets.services import releases, warmup
from controlplane.nodes.models import EngineNode
from controlplane.nodes.services import client_keys, engine_nodes, rollouts
from controlplane.nodes.services import pools as nodes
from controlplane.operations import degradation
from controlplane.operations import services as operations
from controlplane.replays.comparison_services import replay_comparison_create
from controlplane.reviews import services as reviews
from controlplane.reviews.models import ReviewItem
from tests.datasets.factories import easy_dataset, train_now
from tests.replays.factories import finished_run
from tests.reviews.factories import sample as review_sample


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


def _with_review_item_then(call, *, labelled_by: str | None = None):
    """A message sampled by node gpu-1 of staging (labelled by `labelled_by` when given), then the call on it."""

    def run(world):
        node, _ = engine_nodes.node_create(actor=world["sre"], name="gpu-1", pool=world["staging"])
        reviews.review_samples_ingest(node_id=node.pk, samples=[review_sample("the cup arrived broken")])
        item = ReviewItem.objects.get()
        if labelled_by:
            reviews.review_item_label(actor=world[labelled_by], item=item, label="other")
        world["baseline"] = AuditEntry.objects.count()
        return call(world, item)

    return run


def _with_node_then(call):
    """Register node gpu-1 in staging, connected, then run the call on it."""

    def run(world):
        node, _ = engine_nodes.node_create(actor=world["sre"], name="gpu-1", pool=world["staging"])
        EngineNode.objects.filter(pk=node.pk).update(is_connected=True, last_seen_at=timezone.now())
        world["baseline"] = AuditEntry.objects.count()
        return call(world, node)

    return run


def _with_client_key_then(call):
    """Issue client key web-chat for staging, then run the call on it."""

    def run(world):
        key, _ = client_keys.client_key_create(actor=world["sre"], name="web-chat", pools=[world["staging"]])
        world["baseline"] = AuditEntry.objects.count()
        return call(world, key)

    return run


def _with_model_then(call):
    """Register model qwen3-8b in the catalog, then run the call on it."""

    def run(world):
        entry = catalog.model_entry_create(actor=world["sre"], name="qwen3-8b", source="Qwen/Qwen3-8B")
        world["baseline"] = AuditEntry.objects.count()
        return call(world, entry)

    return run


def _with_log_then(call):
    """Store conversation log festival-log (in a temporary directory), then run the call on it."""

    def run(world):
        import tempfile

        from django.test import override_settings

        from tests.replays.logs import log_lines, store_log

        with override_settings(CONVERSATION_LOG_DIR=tempfile.mkdtemp(prefix="replay-audit-")):
            log = store_log(world["agent"], log_lines(3))
        world["baseline"] = AuditEntry.objects.count()
        return call(world, log)

    return run


def _with_replay_then(call):
    """Queue a replay of a stored log against staging, then run the call on it."""

    def run(world):
        from controlplane.replays.services import replay_run_create

        def queue(w, log):
            replay = replay_run_create(actor=w["agent"], pool=w["staging"], log=log, reason="baseline", qps=5)
            w["baseline"] = AuditEntry.objects.count()
            return call(w, replay)

        return _with_log_then(queue)(world)

    return run


def _with_study_then(call):
    """Register node gpu-1 in staging and queue a tuning study of v2 on it, then run the call on it."""

    def run(world):
        from controlplane.tuning.services import study_create

        def queue(w, log):
            engine_nodes.node_create(actor=w["sre"], name="gpu-1", pool=w["staging"])
            study = study_create(actor=w["sre"], **_study_args(w, log))
            w["baseline"] = AuditEntry.objects.count()
            return call(w, study)

        return _with_log_then(queue)(world)

    return run


def _study_args(world, log) -> dict:
    return {
        "pool": world["staging"],
        "base_version": world["v2"],
        "log": log,
        "space": [{"path": "batch.max_size", "type": "int", "low": 4, "high": 16}],
        "objective": "min_p99",
        "replay": {"qps": 5, "duration_s": 5},
        "budget": 2,
        "reason": "batch size for the festival",
    }


def _with_node_and_log_then(call):
    def run(world):
        engine_nodes.node_create(actor=world["sre"], name="gpu-1", pool=world["staging"])
        return _with_log_then(call)(world)

    return run


def _canary_then(call, *, paused: bool = False):
    """Staging with two nodes runs v1; v2 is published and reaches gpu-1 first (a running rollout)."""

    def run(world):
        staging, sre = world["staging"], world["sre"]
        for name in ("gpu-1", "gpu-2"):
            engine_nodes.node_create(actor=sre, name=name, pool=staging)
        nodes.pool_publish(actor=sre, pool=staging, version=world["v1"], reason="first")
        nodes.pool_publish(actor=sre, pool=staging, version=world["v2"], reason="canary")
        rollout = staging.rollouts.get()
        if paused:
            rollout = rollouts.rollout_pause(actor=sre, rollout=rollout, reason="look at it")
        world["baseline"] = AuditEntry.objects.count()
        return call(world, rollout)

    return run


def _with_degradation_then(call):
    """Degrade staging by hand, then run the call."""

    def run(world):
        degradation.degradation_enable(actor=world["sre"], pool=world["staging"], reason="peak")
        world["baseline"] = AuditEntry.objects.count()
        return call(world)

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


WARMUP_CSV = "text,intent\n我的订单到哪了,order_status\nwhere is my order?,order_status\n"


def _with_warmup_then(call):
    """Create warmup dataset `faq` (version 1), then run the call on that version."""

    def run(world):
        dataset = warmup.warmup_dataset_create(actor=world["agent"], name="faq", content=WARMUP_CSV, fmt="csv")
        world["baseline"] = AuditEntry.objects.count()
        return call(world, dataset.versions.get())

    return run


LOG_LINE = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'


def _in_log_dirs(call):
    """Run the call with conversation logs stored in, and imported from, fresh temporary directories."""

    def run(world):
        with tempfile.TemporaryDirectory() as stored, tempfile.TemporaryDirectory() as imports:
            with open(f"{imports}/june.jsonl", "wb") as file:
                file.write(LOG_LINE * 5)
            with override_settings(CONVERSATION_LOG_DIR=stored, CONVERSATION_LOG_IMPORT_DIR=imports):
                return call(world)

    return run


def _with_log_then(call):
    """Store log `june` and publish v1 to staging, then run the call on the log."""

    def run(world):
        nodes.pool_publish(actor=world["sre"], pool=world["staging"], version=world["v1"], reason="first")
        log = conversation_logs.conversation_log_create(
            actor=world["agent"], name="june", filename="june.jsonl", chunks=[LOG_LINE * 5]
        )
        world["staging"].refresh_from_db()
        world["baseline"] = AuditEntry.objects.count()
        return call(world, log)

    return _in_log_dirs(run)


def _with_incident_then(call):
    """Install the default rules, lose node gpu-1 (node-lost fires at once), then run the call on the incident."""

    def run(world):
        install_default_rules(AlertRule, AlertRuleVersion)
        node, _ = engine_nodes.node_create(actor=world["sre"], name="gpu-1", pool=world["staging"])
        EngineNode.objects.filter(pk=node.pk).update(is_connected=False, connected_at=timezone.now())
        evaluate()
        world["baseline"] = AuditEntry.objects.count()
        return call(world, AlertGroup.objects.get(rule__name="node-lost"))

    return run


def _with_default_rules_then(call):
    def run(world):
        install_default_rules(AlertRule, AlertRuleVersion)
        return call(world, AlertRule.objects.get(name="p99-latency"))

    return run


def _silence_then_expire(world):
    silence = alert_lifecycle.silence_create(actor=world["sre"], pool="staging", duration_minutes=60, reason="deploy")
    world["baseline"] = AuditEntry.objects.count()
    return alert_lifecycle.silence_expire(actor=world["oncall"], silence=silence, reason="deploy done")


def _compare_two_logs(world):
    """Two finished runs of different logs, compared anyway (force) with a reason."""
    a = finished_run(actor=world["agent"], pool=world["staging"], version=world["v1"], n=50, log_name="festival")
    b = finished_run(actor=world["agent"], pool=world["staging"], version=world["v2"], n=50, log_name="weekday")
    world["baseline"] = AuditEntry.objects.count()
    return replay_comparison_create(
        actor=world["agent"], run_ids=[a.pk, b.pk], force=True, reason="weekday traffic vs festival", resamples=100
    )
