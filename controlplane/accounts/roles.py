"""Roles and the one map from action to the roles allowed to perform it."""

from django.db import models


class Role(models.TextChoices):
    AGENT = "agent", "Agent (customer service / tuning)"
    ONCALL = "oncall", "On-call engineer"
    SRE = "sre", "SRE"
    ADMIN = "admin", "Administrator"


class Action(models.TextChoices):
    VIEW = "view"
    TEMPLATE_WRITE = "template.write"
    WHITELIST_WRITE = "whitelist.write"
    POOL_WRITE = "pool.write"
    POOL_PUBLISH = "pool.publish"
    POOL_ROLLBACK = "pool.rollback"
    POOL_DEGRADE = "pool.degrade"
    PRODUCTION_OVERRIDE = "pool.production_override"
    ALERT_RESPOND = "alert.respond"
    ALERT_RULE_WRITE = "alert.rule_write"
    USER_MANAGE = "user.manage"
    NODE_CREDENTIALS = "node.credentials"
    NODE_OPERATE = "node.operate"
    INTENT_TRAIN = "intent.train"
    INTENT_PUBLISH = "intent.publish"
    OVERRIDE_SET = "override.set"
    WARMUP_WRITE = "warmup.write"
    WARMUP_ASSIGN = "warmup.assign"
    CLIENT_KEY_MANAGE = "client_key.manage"
    MODEL_WRITE = "model.write"
    MODEL_TRUST_REMOTE_CODE = "model.trust_remote_code"
    CONVLOG_WRITE = "convlog.write"
    CONVLOG_IMPORT = "convlog.import"
    REPLAY_RUN = "replay.run"
    TUNING_RUN = "tuning.run"


_ALL = frozenset(Role)
# Admin holds every action: the person who hands out roles can always act in an emergency.
PERMISSIONS: dict[str, frozenset[str]] = {
    Action.VIEW: _ALL,
    Action.TEMPLATE_WRITE: frozenset({Role.AGENT, Role.SRE, Role.ADMIN}),
    Action.WHITELIST_WRITE: frozenset({Role.AGENT, Role.SRE, Role.ADMIN}),
    Action.POOL_WRITE: frozenset({Role.SRE, Role.ADMIN}),
    Action.POOL_PUBLISH: frozenset({Role.SRE, Role.ADMIN}),
    Action.POOL_ROLLBACK: frozenset({Role.SRE, Role.ADMIN}),
    Action.POOL_DEGRADE: frozenset({Role.SRE, Role.ADMIN}),
    Action.PRODUCTION_OVERRIDE: frozenset({Role.SRE, Role.ADMIN}),
    Action.ALERT_RESPOND: frozenset({Role.ONCALL, Role.SRE, Role.ADMIN}),
    # Thresholds decide who gets paged at night: operators own them, on-call acknowledges and silences.
    Action.ALERT_RULE_WRITE: frozenset({Role.SRE, Role.ADMIN}),
    Action.USER_MANAGE: frozenset({Role.ADMIN}),
    Action.NODE_CREDENTIALS: frozenset({Role.SRE, Role.ADMIN}),
    Action.NODE_OPERATE: frozenset({Role.SRE, Role.ADMIN}),
    # Uploading datasets and training is tuning work; what the gateways run is an operator's decision.
    Action.INTENT_TRAIN: frozenset({Role.AGENT, Role.SRE, Role.ADMIN}),
    Action.INTENT_PUBLISH: frozenset({Role.SRE, Role.ADMIN}),
    # Customer service sets and revokes a conversation's override while talking to the customer (seed).
    Action.OVERRIDE_SET: frozenset({Role.AGENT, Role.SRE, Role.ADMIN}),
    # Building warmup sets from what customers ask is tuning work; what a pool's nodes replay is an operator's call.
    Action.WARMUP_WRITE: frozenset({Role.AGENT, Role.SRE, Role.ADMIN}),
    Action.WARMUP_ASSIGN: frozenset({Role.SRE, Role.ADMIN}),
    # A client key is access to the pools' engines, and its business tags lift limits (a whitelisted tag keeps the
    # client's max_tokens): tuning staff edit the whitelists, so handing out tags that use them is an operator's call.
    Action.CLIENT_KEY_MANAGE: frozenset({Role.SRE, Role.ADMIN}),
    # What weights a GPU host loads is an operator's call; templates only name catalog entries.
    Action.MODEL_WRITE: frozenset({Role.SRE, Role.ADMIN}),
    # trust_remote_code runs the model repository's Python on every node that loads it.
    Action.MODEL_TRUST_REMOTE_CODE: frozenset({Role.ADMIN}),
    # Analysing what customers asked is tuning work; reading a file off the control-plane host is an operator's.
    Action.CONVLOG_WRITE: frozenset({Role.AGENT, Role.SRE, Role.ADMIN}),
    Action.CONVLOG_IMPORT: frozenset({Role.SRE, Role.ADMIN}),
    # Replaying logs against a non-production pool is the tuning method's step before any publish: tuning staff run
    # it; against production only an SRE or admin, with a reason (PRODUCTION_OVERRIDE).
    Action.REPLAY_RUN: frozenset({Role.AGENT, Role.SRE, Role.ADMIN}),
    # A tuning study publishes each of its candidates to a (non-production) pool: an operator's call, like a publish.
    Action.TUNING_RUN: frozenset({Role.SRE, Role.ADMIN}),
}


def role_allows(role: str | None, action: str) -> bool:
    return role is not None and role in PERMISSIONS[action]
