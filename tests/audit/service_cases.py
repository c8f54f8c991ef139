"""One case per mutating service: how to call it, and the audit entry it must write (action, actor, reason)."""

from django.test import RequestFactory

from controlplane.accounts import services as accounts
from controlplane.alerts.services import lifecycle as alert_lifecycle
from controlplane.alerts.services import rules as alert_rules
from controlplane.catalog import services as catalog
from controlplane.convlogs.services import analyses as log_analyses
from controlplane.convlogs.services import logs as conversation_logs
from controlplane.datasets.services import datasets, releases, training, warmup
from controlplane.nodes.services import canary_settings, cleanup, client_keys, engine_nodes, rollouts
from controlplane.nodes.services import pools as nodes
from controlplane.operations import degradation
from controlplane.operations import services as operations
from controlplane.params.services import templates, whitelists
from controlplane.replays import services as replays
from controlplane.reviews import services as reviews
from controlplane.tuning import services as tuning
from tests.audit.service_setups import (
    LOG_LINE,
    WARMUP_CSV,
    Case,
    _canary_then,
    _compare_two_logs,
    _in_log_dirs,
    _publish_then_unpublish,
    _publish_twice_then,
    _silence_then_expire,
    _study_args,
    _with_client_key_then,
    _with_default_rules_then,
    _with_degradation_then,
    _with_incident_then,
    _with_intent_model_then,
    _with_log_then,
    _with_model_then,
    _with_node_and_log_then,
    _with_node_then,
    _with_override_then,
    _with_replay_then,
    _with_review_item_then,
    _with_study_then,
    _with_warmup_then,
)
from tests.conftest import PASSWORD
from tests.datasets.data import as_csv, easy_rows

CASES: dict[str, Case] = {
    "controlplane.replays.comparison_services.replay_comparison_create": Case(
        "replay.compare", "agent", "weekday traffic vs festival", _compare_two_logs
    ),
    "controlplane.replays.services.replay_run_create": Case(
        "replay.create",
        "agent",
        "baseline before the cap change",
        _with_log_then(
            lambda w, log: replays.replay_run_create(
                actor=w["agent"], pool=w["staging"], log=log, reason="baseline before the cap change", qps=5
            )
        ),
    ),
    "controlplane.replays.services.replay_run_cancel": Case(
        "replay.cancel",
        "sre",
        "wrong log",
        _with_replay_then(lambda w, r: replays.replay_run_cancel(actor=w["sre"], run=r, reason="wrong log")),
    ),
    "controlplane.tuning.services.study_create": Case(
        "tuning.create",
        "sre",
        "batch size for the festival",
        _with_node_and_log_then(lambda w, log: tuning.study_create(actor=w["sre"], **_study_args(w, log))),
    ),
    "controlplane.tuning.services.study_cancel": Case(
        "tuning.cancel",
        "sre",
        "wrong log",
        _with_study_then(lambda w, s: tuning.study_cancel(actor=w["sre"], study=s, reason="wrong log")),
    ),
    "controlplane.alerts.services.rules.alert_rule_create": Case(
        "alert_rule.create",
        "sre",
        "gpu temperature",
        lambda w: alert_rules.alert_rule_create(
            actor=w["sre"],
            name="kv-cache-full",
            metric="kv_cache_usage",
            scope="node",
            comparison="gt",
            warn=0.9,
            critical=0.97,
            for_s=30,
            runbook="memory-fragmentation",
            summary="KV cache nearly full",
            comment="gpu temperature",
        ),
    ),
    "controlplane.alerts.services.rules.alert_rule_version_create": Case(
        "alert_rule.version_create",
        "admin",
        "festival: page earlier",
        _with_default_rules_then(
            lambda w, rule: alert_rules.alert_rule_version_create(
                actor=w["admin"],
                rule=rule,
                base_number=rule.latest_number,
                comment="festival: page earlier",
                **{**rule.versions.get(number=rule.latest_number).fields(), "warn": 1.4},
            )
        ),
    ),
    "controlplane.alerts.services.lifecycle.alert_group_acknowledge": Case(
        "alert.acknowledge",
        "oncall",
        "on it: host rebooting",
        _with_incident_then(
            lambda w, group: alert_lifecycle.alert_group_acknowledge(
                actor=w["oncall"], group=group, note="on it: host rebooting"
            )
        ),
    ),
    "controlplane.alerts.services.lifecycle.silence_create": Case(
        "silence.create",
        "oncall",
        "planned maintenance",
        lambda w: alert_lifecycle.silence_create(
            actor=w["oncall"], node="gpu-7", duration_minutes=120, reason="planned maintenance"
        ),
    ),
    "controlplane.alerts.services.lifecycle.silence_expire": Case(
        "silence.expire", "oncall", "deploy done", _silence_then_expire
    ),
    "controlplane.datasets.services.datasets.intent_dataset_create": Case(
        "intent_dataset.create",
        "agent",
        "",
        lambda w: datasets.intent_dataset_create(
            actor=w["agent"], name="shop", content=as_csv(easy_rows(2)), fmt="csv"
        ),
    ),
    "controlplane.reviews.services.review_item_label": Case(
        "review_item.label",
        "agent",
        "",
        _with_review_item_then(
            lambda w, item: reviews.review_item_label(actor=w["agent"], item=item, label="return_refund")
        ),
    ),
    "controlplane.reviews.services.review_item_undo": Case(
        "review_item.undo",
        "sre",
        "",
        _with_review_item_then(
            lambda w, item: reviews.review_item_undo(actor=w["sre"], item=item), labelled_by="agent"
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
    "controlplane.convlogs.services.logs.conversation_log_create": Case(
        "convlog.upload",
        "agent",
        "june logs",
        _in_log_dirs(
            lambda w: conversation_logs.conversation_log_create(
                actor=w["agent"], name="june", description="june logs", filename="june.jsonl", chunks=[LOG_LINE]
            )
        ),
    ),
    "controlplane.convlogs.services.logs.conversation_log_import": Case(
        "convlog.import",
        "sre",
        "from the log host",
        _in_log_dirs(
            lambda w: conversation_logs.conversation_log_import(
                actor=w["sre"], name="june", description="from the log host", path="june.jsonl"
            )
        ),
    ),
    "controlplane.convlogs.services.analyses.log_analysis_create": Case(
        "convlog.analysis_create",
        "agent",
        "",
        _with_log_then(lambda w, log: log_analyses.log_analysis_create(actor=w["agent"], log=log, pool=w["staging"])),
    ),
    "controlplane.datasets.services.warmup.warmup_dataset_create": Case(
        "warmup_dataset.create",
        "agent",
        "festival FAQs",
        lambda w: warmup.warmup_dataset_create(
            actor=w["agent"], name="faq", content=WARMUP_CSV, fmt="csv", comment="festival FAQs"
        ),
    ),
    "controlplane.datasets.services.warmup.warmup_version_create": Case(
        "warmup_dataset.version_create",
        "sre",
        "from the festival log",
        _with_warmup_then(
            lambda w, v: warmup.warmup_version_create(
                actor=w["sre"],
                dataset=v.dataset,
                base_number=1,
                content='{"messages": [{"role": "user", "content": "where is my order?"}]}',
                fmt="jsonl",
                source="conversation_log",
                comment="from the festival log",
            )
        ),
    ),
    "controlplane.datasets.services.warmup.pool_warmup_assign": Case(
        "warmup.assign",
        "sre",
        "cold starts after deploys",
        _with_warmup_then(
            lambda w, v: warmup.pool_warmup_assign(
                actor=w["sre"], pool=w["staging"], version=v, reason="cold starts after deploys"
            )
        ),
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
    "controlplane.operations.degradation.degradation_enable": Case(
        "pool.degrade",
        "sre",
        "sales festival peak",
        lambda w: degradation.degradation_enable(actor=w["sre"], pool=w["staging"], reason="sales festival peak"),
    ),
    "controlplane.operations.degradation.degradation_disable": Case(
        "pool.degrade_end",
        "sre",
        "peak over",
        _with_degradation_then(
            lambda w: degradation.degradation_disable(actor=w["sre"], pool=w["staging"], reason="peak over")
        ),
    ),
    "controlplane.nodes.services.engine_nodes.node_create": Case(
        "node.create",
        "sre",
        "",
        lambda w: engine_nodes.node_create(actor=w["sre"], name="gpu-9", pool=w["staging"]),
    ),
    "controlplane.nodes.services.client_keys.client_key_create": Case(
        "client_key.create",
        "sre",
        "",
        lambda w: client_keys.client_key_create(
            actor=w["sre"], name="web-chat", pools=[w["staging"]], business_tags=["order"]
        ),
    ),
    "controlplane.nodes.services.client_keys.client_key_revoke": Case(
        "client_key.revoke",
        "admin",
        "key leaked in a screenshot",
        _with_client_key_then(
            lambda w, k: client_keys.client_key_revoke(
                actor=w["admin"], client_key=k, reason="key leaked in a screenshot"
            )
        ),
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
    "controlplane.nodes.services.cleanup.node_cleanup_request": Case(
        "node.cleanup",
        "sre",
        "fragmentation at 41 %",
        _with_node_then(
            lambda w, n: cleanup.node_cleanup_request(actor=w["sre"], node=n, reason="fragmentation at 41 %")
        ),
    ),
    "controlplane.nodes.services.cleanup.pool_cleanup_request": Case(
        "pool.cleanup",
        "sre",
        "weekly cleanup",
        _with_node_then(
            lambda w, n: cleanup.pool_cleanup_request(actor=w["sre"], pool=n.pool, reason="weekly cleanup")
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
        lambda w: accounts.user_token_issue(
            request=RequestFactory().post("/api/v1/auth/token/"), username="oncall", password=PASSWORD
        ),
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
    "controlplane.catalog.services.model_entry_create": Case(
        "model.create",
        "sre",
        "",
        lambda w: catalog.model_entry_create(actor=w["sre"], name="qwen3-8b", source="Qwen/Qwen3-8B"),
    ),
    "controlplane.catalog.services.model_entry_update": Case(
        "model.update",
        "admin",
        "reviewed the repository's code",
        _with_model_then(
            lambda w, entry: catalog.model_entry_update(
                actor=w["admin"],
                entry=entry,
                changes={"trust_remote_code": True},
                reason="reviewed the repository's code",
            )
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
    "controlplane.nodes.services.canary_settings.pool_canary_update": Case(
        "pool.canary_update",
        "sre",
        "two stages are enough here",
        lambda w: canary_settings.pool_canary_update(
            actor=w["sre"],
            pool=w["staging"],
            canary_stages=[{"nodes": 1}, {"percent": 100}],
            analysis_window_s=30,
            reason="two stages are enough here",
        ),
    ),
    "controlplane.nodes.services.rollouts.rollout_pause": Case(
        "rollout.pause",
        "sre",
        "look at it",
        _canary_then(lambda w, r: rollouts.rollout_pause(actor=w["sre"], rollout=r, reason="look at it")),
    ),
    "controlplane.nodes.services.rollouts.rollout_resume": Case(
        "rollout.resume",
        "sre",
        "looks fine",
        _canary_then(lambda w, r: rollouts.rollout_resume(actor=w["sre"], rollout=r, reason="looks fine"), paused=True),
    ),
    "controlplane.nodes.services.rollouts.rollout_promote": Case(
        "rollout.promote",
        "admin",
        "urgent fix",
        _canary_then(lambda w, r: rollouts.rollout_promote(actor=w["admin"], rollout=r, reason="urgent fix")),
    ),
    "controlplane.nodes.services.rollouts.rollout_abort": Case(
        "rollout.abort",
        "sre",
        "wrong version",
        _canary_then(lambda w, r: rollouts.rollout_abort(actor=w["sre"], rollout=r, reason="wrong version")),
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
