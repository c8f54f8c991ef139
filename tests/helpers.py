"""Assertion helpers shared by the service and API tests."""

from django.apps import apps
from django.db import connection

# Every table a refused call must leave untouched.
STATE_MODELS = (
    "accounts.User",
    "authtoken.Token",
    "params.ParameterTemplate",
    "params.TemplateVersion",
    "params.Whitelist",
    "params.WhitelistVersion",
    "nodes.Pool",
    "nodes.PoolRelease",
    "nodes.EngineNode",
    "nodes.NodeCommand",
    "nodes.VersionRun",
    "datasets.IntentDataset",
    "datasets.IntentModel",
    "datasets.IntentModelRelease",
    "datasets.WarmupDataset",
    "datasets.WarmupDatasetVersion",
    "datasets.PoolWarmup",
    "alerts.AlertRule",
    "alerts.AlertRuleVersion",
    "alerts.AlertEvent",
    "alerts.Silence",
    "audit.AuditEntry",
)


def state_snapshot() -> dict:
    """Row counts of every domain table plus what each pool runs and each user's role."""
    snapshot: dict = dict(zip(STATE_MODELS, _row_counts(), strict=True))
    snapshot["pool.desired"] = sorted(apps.get_model("nodes.Pool").objects.values_list("name", "desired_version"))
    snapshot["user.roles"] = sorted(
        apps.get_model("accounts.User").objects.values_list("username", "role", "is_active")
    )
    snapshot["node.tokens"] = sorted(apps.get_model("nodes.EngineNode").objects.values_list("name", "token_hash"))
    snapshot["template.latest"] = sorted(
        apps.get_model("params.ParameterTemplate").objects.values_list("name", "latest_number")
    )
    return snapshot


def _row_counts() -> tuple[int, ...]:
    """COUNT(*) of each table of STATE_MODELS, in one query (the matrix takes two snapshots a test)."""
    tables = [connection.ops.quote_name(apps.get_model(label)._meta.db_table) for label in STATE_MODELS]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(f"(SELECT COUNT(*) FROM {table})" for table in tables))
        return tuple(cursor.fetchone())


def error_paths(body: dict) -> list[str]:
    """The field paths an error body names: schema errors list them, serializer errors key them."""
    detail = body.get("detail")
    if isinstance(detail, list):
        return [item["path"] for item in detail if isinstance(item, dict) and "path" in item]
    if isinstance(detail, dict):
        return list(detail)
    return []
