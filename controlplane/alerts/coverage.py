"""Which alert rules cannot watch a node because the node has no source for the rule's figure, and why.

Some figures need something a node may lack: fragmentation needs a CUDA caching allocator (the vLLM CPU build has
none), SM activity needs a DCGM exporter, GPU utilisation needs a GPU. Their null is not "nothing to measure right
now" (as a latency is without requests) and must never read as healthy: the agent names why each is null in the
sample's `absent` map, the evaluator treats a rule on such a figure as "no source" (the alert keeps its state,
nothing resolves), and the on-call and node pages list each node once with the rules it leaves uncovered.
"""

from dataclasses import dataclass
from datetime import datetime

from controlplane.alerts import selectors, signals
from controlplane.metrics import selectors as metrics
from controlplane.metrics.samples import ABSENT

# Figures whose null means "this node cannot measure it" rather than "nothing happened".
SOURCED_FIGURES = frozenset({"fragmentation_ratio", "gpu_util", "sm_util"})
NO_REASON = "the node sent no value and no reason"
NO_NODE_SOURCE = "no node here has a source for it"


@dataclass(frozen=True)
class NoSource:
    """A rule's figure is absent on the entity for this reason (an evaluation value, like UNKNOWN)."""

    reason: str


def no_source(values: dict, metric: str, scope: str = signals.NODE) -> NoSource | None:
    """NoSource when `metric` is a sourced figure and null in these latest values, else None."""
    if metric not in SOURCED_FIGURES or values.get(metric) is not None:
        return None
    if scope != signals.NODE:
        return NoSource(NO_NODE_SOURCE)  # an aggregate is null only when every node's figure is
    reasons = values.get(ABSENT)
    reason = reasons.get(metric) if isinstance(reasons, dict) else None
    return NoSource(reason if isinstance(reason, str) and reason else NO_REASON)


def uncovered_by_node(*, now: datetime, node: str | None = None) -> dict[str, list[dict]]:
    """node -> [{rule, metric, label, reason}] for the enabled node rules its latest fresh sample cannot feed."""
    versions = [
        v
        for v in selectors.current_rule_versions(enabled_only=True)
        if v.scope == signals.NODE and v.metric in SOURCED_FIGURES
    ]
    if not versions:
        return {}
    latest = metrics.latest_values(scope=signals.NODE, max_age_s=signals.SAMPLE_FRESH_S, now=now)
    result: dict[str, list[dict]] = {}
    for name in sorted(latest):
        if node is not None and name != node:
            continue
        for version in versions:
            missing = no_source(latest[name], version.metric)
            if missing is not None:
                result.setdefault(name, []).append(
                    {
                        "rule": version.rule.name,
                        "metric": version.metric,
                        "label": signals.SIGNALS[version.metric].label,
                        "reason": missing.reason,
                    }
                )
    return result
