"""The one place that sends to Channels groups: group names and typed event payloads."""

from typing import TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from controlplane.lib import event_sequence


def fleet_group() -> str:
    return "fleet"


def pool_group(pool_name: str) -> str:
    return f"pool.{pool_name}"


class VersionRef(TypedDict):
    template: str
    number: int
    hash: str


def version_ref(version) -> VersionRef | None:
    """How events (and audit entries) name a template version: its template, number and content hash."""
    if version is None:
        return None
    return {"template": version.template.name, "number": version.number, "hash": version.content_hash}


class PoolReleased(TypedDict):
    type: str  # "pool.released": consumers forward it through their `pool_released` handler
    pool: str
    kind: str
    version: VersionRef
    previous_version: VersionRef | None
    actor: str
    reason: str
    at: str


def is_sequenced(group: str) -> bool:
    """The groups whose events change a page's state rather than carry all of it: their events are numbered."""
    return group in (fleet_group(), alerts_group()) or group.startswith(pool_group(""))


def send(groups: list[str], event: dict) -> None:
    """Send `event` to each group; events to the fleet, pool and alerts groups are numbered (event_sequence.py)."""
    layer = get_channel_layer()
    if layer is None:
        return
    for group in groups:
        number = event_sequence.next_number(group) if is_sequenced(group) else None
        async_to_sync(layer.group_send)(group, event_sequence.stamped(group, event, number))


async def send_async(groups: list[str], event: dict) -> None:
    """The same, from a consumer's event loop (no thread hop)."""
    layer = get_channel_layer()
    if layer is None:
        return
    for group in groups:
        number = await event_sequence.next_number_async(group) if is_sequenced(group) else None
        await layer.group_send(group, event_sequence.stamped(group, event, number))


def agents_group(pool_name: str) -> str:
    """Every connected agent of a pool; config pushes go here once and fan out to all of them."""
    return f"agents.{pool_name}"


def node_group(node_id: int) -> str:
    """One agent's connection: commands and credential revocation."""
    return f"node.{node_id}"


def intent_models_group() -> str:
    """Browsers watching intent model training (the intents pages)."""
    return "intent-models"


def conversation_logs_group() -> str:
    """Browsers watching conversation-log analyses (the conversation logs pages)."""
    return "conversation-logs"


class LogAnalysisProgress(TypedDict):
    type: str  # "log_analysis.progress": LogAnalysisEventsConsumer.log_analysis_progress
    analysis_id: int
    log: str
    status: str
    progress: int  # 0-100
    progress_text: str


class IntentModelProgress(TypedDict):
    type: str  # "intent_model.progress": IntentModelEventsConsumer.intent_model_progress
    model_id: int
    dataset: str
    number: int
    status: str
    progress: int  # 0-100
    progress_text: str
    accuracy: float | None  # held-out accuracy, once succeeded


class IntentModelPublished(TypedDict):
    type: str  # "intent_model.published": to agents_group(pool); the agent consumer's handler fetches the document
    pool: str
    model_id: int | None  # None: back to the model built into the agent
    sha256: str | None


class WarmupAssigned(TypedDict):
    type: str  # "warmup.assigned": to agents_group(pool); AgentConsumer.warmup_assigned (a no-op until warmup runs)
    pool: str
    dataset: str
    version: int
    version_id: int  # what the agent will fetch the messages by (selectors.warmup_messages_text)
    sha256: str  # of the messages' compact JSON
    messages: int


class ConfigPush(TypedDict):
    type: str  # "config.push": AgentConsumer.config_push
    version_id: int  # lets the consumer record an ACK without looking the version up
    version: VersionRef
    hash: str
    text: str  # the agent-facing message, already JSON


class NodeCommandEvent(TypedDict):
    type: str  # "node.command": AgentConsumer.node_command
    id: int
    op: str


class NodeUpdated(TypedDict):
    type: str  # "node.updated": PoolEventsConsumer.node_updated
    node: dict


class NodeCommandChanged(TypedDict):
    type: str  # "node.command_changed": PoolEventsConsumer.node_command_changed (node pages follow their commands)
    command: dict  # controlplane.nodes.selectors.command_summary


class RolloutUpdated(TypedDict):
    type: str  # "rollout.updated": PoolEventsConsumer.rollout_updated; to pool_group(pool)
    rollout: dict  # controlplane.nodes.selectors.rollout_summary


class NodesUpdated(TypedDict):
    type: str  # "nodes.updated": PoolEventsConsumer.nodes_updated; partial entries, merged by browsers
    nodes: list[dict]


class CanaryPolicy(TypedDict):
    nodes: list[str]  # the canary nodes of the pool's active rollout, which get this bundle instead
    hash: str
    text: str


class PolicyPush(TypedDict):
    type: str  # "policy.push": AgentConsumer.policy_push forwards `text` (or, to a canary node, `canary.text`) as is
    pool: str
    hash: str  # sha256 of the bundle's canonical content
    text: str  # the agent-facing policy bundle, already JSON
    canary: CanaryPolicy | None  # during a rollout whose whitelist pins differ from the rest of the pool's


def metrics_fleet_group() -> str:
    """Browsers watching the fleet's live figures (the overview)."""
    return "metrics.fleet"


def metrics_pool_group(pool_name: str) -> str:
    return f"metrics.pool.{pool_name}"


def metrics_node_group(node_name: str) -> str:
    return f"metrics.node.{node_name}"


class MetricsSample(TypedDict):
    type: str  # "metrics.sample": MetricsConsumer.metrics_sample
    scope: str  # "node", "pool" or "fleet"
    name: str  # the node's or pool's name, or "fleet"
    t: float  # the agent's `t` of the newest sample the values include (end-to-end freshness is measured on it)
    values: dict  # a node's sample as sent, or the pool's or fleet's aggregate (controlplane/metrics/aggregation.py)


def alerts_group() -> str:
    """Browsers on the on-call page: alerts and incidents as they change."""
    return "alerts"


class AlertsChanged(TypedDict):
    type: str  # "alerts.changed": AlertEventsConsumer.alerts_changed
    alerts: list[dict]  # summaries of the alerts that changed (controlplane.alerts.selectors.alert_summary)
    incidents: list[dict]  # summaries of the incidents that changed, with their affected nodes
    notify: list[int]  # ids of incidents that just fired or escalated and are not silenced (browser notifications)
    evaluator: dict  # {"is_running": bool, "text": why nothing fires when it is not}
