"""The control plane's own Prometheus endpoint, `/metrics`: fleet figures, node counts and alert states.

Everything is read at scrape time into a registry of its own (nothing process-global), from the same
selectors the dashboard uses: the newest sample of every node, pool and the fleet, the node table, and the
open alerts. Access: `Authorization: Bearer <METRICS_API_KEY>`, or a signed-in user who may view.
"""

import hmac
from collections import Counter

from django.conf import settings
from django.http import HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from controlplane.accounts.roles import Action
from controlplane.alerts import coverage, detectors, intent_drift, signals
from controlplane.alerts.derived import canary_rolled_back_pools, node_is_lost, warmup_failed
from controlplane.alerts.models import Alert, EvaluatorLease, NodeRestartTrack
from controlplane.lib.loop_health import LoopState, loops_health, process_name
from controlplane.metrics import coalescing
from controlplane.metrics import selectors as metrics
from controlplane.metrics.samples import CONFIDENCE_BUCKETS
from controlplane.nodes.models import EngineNode, Pool
from controlplane.params.models import TemplateVersion

# Count maps of the samples exported per bucket, at pool and fleet scope (per node would multiply series).
LENGTH_BUCKETS = ("le256", "le512", "le1k", "le2k", "gt2k")
LABELS = {signals.NODE: ["node", "pool"], signals.POOL: ["pool"], signals.FLEET: []}


class ControlPlaneCollector:
    """Builds every family on each scrape."""

    def __init__(self, now=None):
        self.now = now

    def collect(self):
        now = self.now or timezone.now()
        nodes = list(
            EngineNode.objects.values(
                "name", "pool__name", "is_connected", "last_seen_at", "connected_at", "token_hash",
                "applied_hash", "last_nack_hash", "pool__desired_version", "warmup_state", "warmup_failed_at",
            )
        )  # fmt: skip
        pool_of = {n["name"]: n["pool__name"] for n in nodes}
        latest = {
            scope: metrics.latest_values(scope=scope, max_age_s=signals.SAMPLE_FRESH_S, now=now)
            for scope in signals.SCOPES
        }
        yield from self.sample_families(latest, pool_of)
        yield from self.length_families(latest)
        yield from self.confidence_families(latest)
        yield from self.intent_drift_families(now)
        yield from self.node_families(nodes, now)
        yield self.canary_family(now)
        yield from self.trend_families(pool_of)
        yield from self.alert_families()
        yield self.no_source_family(pool_of, now)
        yield from self.loop_families(now)
        yield from self.live_families()

    def sample_families(self, latest, pool_of):
        for signal in signals.SAMPLE_METRICS:
            for scope in signals.SCOPES:
                family = GaugeMetricFamily(
                    signal.prom_series(scope),
                    f"{signal.label.capitalize()} ({scope}; newest sample at most {signals.SAMPLE_FRESH_S:g} s old)",
                    labels=LABELS[scope],
                )
                for name, values in sorted(latest[scope].items()):
                    value = values.get(signal.name)
                    if isinstance(value, bool) or not isinstance(value, int | float):
                        continue
                    if scope == signals.NODE:
                        labels = [name, pool_of.get(name, "")]
                    else:
                        labels = [name] if scope == signals.POOL else []
                    family.add_metric(labels, float(value))
                yield family
        restarts = CounterMetricFamily(
            signals.ENGINE_RESTARTS_10M.prom_series(signals.NODE).removesuffix("_total"),
            "Engine restarts the node's agent reported since it started (resets when the agent restarts)",
            labels=LABELS[signals.NODE],
        )
        for name, values in sorted(latest[signals.NODE].items()):
            value = values.get("engine_restarts")
            if isinstance(value, int | float) and not isinstance(value, bool):
                restarts.add_metric([name, pool_of.get(name, "")], float(value))
        yield restarts

    def length_families(self, latest):
        for scope in (signals.POOL, signals.FLEET):
            family = GaugeMetricFamily(
                f"controlplane_{scope}_requests_by_length",
                f"Requests in the last sample window by prompt+completion tokens ({scope})",
                labels=[*LABELS[scope], "bucket"],
            )
            for name, values in sorted(latest[scope].items()):
                hist = values.get("length_hist") or {}
                for bucket in LENGTH_BUCKETS:
                    count = hist.get(bucket)
                    if isinstance(count, int | float) and not isinstance(count, bool):
                        family.add_metric([*([name] if scope == signals.POOL else []), bucket], float(count))
            yield family

    def confidence_families(self, latest):
        for scope in (signals.POOL, signals.FLEET):
            family = GaugeMetricFamily(
                f"controlplane_{scope}_intent_classified_by_confidence",
                f"Classified requests in the last sample window by the classifier's confidence, in % ({scope})",
                labels=[*LABELS[scope], "bucket"],
            )
            for name, values in sorted(latest[scope].items()):
                hist = values.get("intent_confidence_hist") or {}
                for bucket in CONFIDENCE_BUCKETS:
                    count = hist.get(bucket, 0)
                    if isinstance(count, int | float) and not isinstance(count, bool):
                        family.add_metric([*([name] if scope == signals.POOL else []), bucket], float(count))
            yield family

    def intent_drift_families(self, now):
        """The intent drift values per pool (controlplane/alerts/intent_drift.py), computed for this scrape."""
        values = intent_drift.drift_by_pool(now=now)
        for signal in (signals.INTENT_DRIFT_SHARE, signals.INTENT_DRIFT_RISE):
            family = GaugeMetricFamily(
                signal.prom_series(signals.POOL), signal.label.capitalize(), labels=LABELS[signals.POOL]
            )
            for pool, found in sorted(values.items()):
                if found.get(signal.name) is not None:
                    family.add_metric([pool], found[signal.name])
            yield family

    def node_families(self, nodes, now):
        last_sample = metrics.last_sample_at(now=now)
        desired = _desired_hashes({n["pool__desired_version"] for n in nodes if n["pool__desired_version"]})
        by_status = Counter()
        lost = GaugeMetricFamily(
            "controlplane_node_lost", "1 when the node is lost (no connection or heartbeat)", labels=["node", "pool"]
        )
        nacked = GaugeMetricFamily(
            "controlplane_node_rollout_nacked",
            "1 when the node refused its pool's desired version",
            labels=["node", "pool"],
        )
        warmup = GaugeMetricFamily(
            "controlplane_node_warmup_failed",
            "1 when the node's last warmup failed, or one failed within the last 10 minutes",
            labels=["node", "pool"],
        )
        age = GaugeMetricFamily(
            "controlplane_node_metrics_age_seconds",
            "Seconds since the node's newest metric sample",
            labels=["node", "pool"],
        )
        for node in nodes:
            labels = [node["name"], node["pool__name"]]
            is_lost = node_is_lost(node, now)
            by_status[(node["pool__name"], "lost" if is_lost else "connected")] += 1
            if node["token_hash"] and (node["connected_at"] or node["last_seen_at"]):
                lost.add_metric(labels, 1.0 if is_lost else 0.0)
            want = desired.get(node["pool__desired_version"])
            if want:
                refused = node["last_nack_hash"] == want and node["applied_hash"] != want
                nacked.add_metric(labels, 1.0 if refused else 0.0)
            if node["token_hash"]:
                warmup.add_metric(labels, 1.0 if warmup_failed(node, now) else 0.0)
            if node["name"] in last_sample:
                age.add_metric(labels, max(0.0, (now - last_sample[node["name"]]).total_seconds()))
        nodes_family = GaugeMetricFamily(
            "controlplane_nodes", "Registered engine nodes by pool and connection state", labels=["pool", "state"]
        )
        for (pool, state), count in sorted(by_status.items()):
            nodes_family.add_metric([pool, state], float(count))
        yield from (nodes_family, lost, nacked, warmup, age)

    def canary_family(self, now):
        rolled_back = canary_rolled_back_pools(now)
        family = GaugeMetricFamily(
            signals.CANARY_ROLLED_BACK.prom_series(signals.POOL),
            "1 when the pool's canary was rolled back automatically within the last 10 minutes",
            labels=LABELS[signals.POOL],
        )
        for pool in Pool.objects.order_by("name").values_list("name", flat=True):
            family.add_metric([pool], 1.0 if pool in rolled_back else 0.0)
        return family

    def trend_families(self, pool_of):
        """The trend detectors' values per node, as the evaluator computes them (controlplane/alerts/detectors.py)."""
        values = detectors.trends_read()
        for signal in (signals.BATCH_TIMEOUT_DROP, signals.GPU_MEMORY_LEAK):
            family = GaugeMetricFamily(
                signal.prom_series(signals.NODE), signal.label.capitalize(), labels=LABELS[signals.NODE]
            )
            for name, found in sorted(values.items()):
                if name in pool_of and found.get(signal.name) is not None:
                    family.add_metric([name, pool_of[name]], found[signal.name])
            yield family

    def alert_families(self):
        open_alerts = Alert.objects.exclude(state=Alert.State.RESOLVED)
        counts = Counter(open_alerts.values_list("rule__name", "severity", "state"))
        family = GaugeMetricFamily(
            "controlplane_alerts", "Open alerts by rule, severity and state (pending or firing)",
            labels=["rule", "severity", "state"],
        )  # fmt: skip
        for (rule, severity, state), count in sorted(counts.items()):
            family.add_metric([rule, severity, state], float(count))
        yield family
        lease = EvaluatorLease.objects.filter(pk=1).first()
        duration = GaugeMetricFamily(
            "controlplane_alert_evaluation_duration_seconds", "How long the last alert evaluation pass took"
        )
        finished = GaugeMetricFamily(
            "controlplane_alert_evaluation_last_finished_timestamp_seconds", "When the last evaluation pass finished"
        )
        if lease and lease.last_duration_ms is not None:
            duration.add_metric([], lease.last_duration_ms / 1000)
        if lease and lease.last_finished_at is not None:
            finished.add_metric([], lease.last_finished_at.timestamp())
        yield from (duration, finished)
        tracked = GaugeMetricFamily(
            "controlplane_alert_restart_tracks", "Nodes whose engine-restart counter the evaluator tracks"
        )
        tracked.add_metric([], float(NodeRestartTrack.objects.count()))
        yield tracked

    def no_source_family(self, pool_of, now):
        """1 per node rule the node has no source for (alerts/coverage.py): the rule watches nothing there."""
        family = GaugeMetricFamily(
            "controlplane_alert_rule_no_source",
            "1 when the node has no source for the rule's figure (no fragmentation reading, no DCGM exporter, no GPU):"
            " the rule is neither firing nor healthy on that node",
            labels=["node", "pool", "rule", "metric"],
        )
        for node, entries in coverage.uncovered_by_node(now=now).items():
            for entry in entries:
                family.add_metric([node, pool_of.get(node, ""), entry["rule"], entry["metric"]], 1.0)
        return family

    def loop_families(self, now):
        """The background loops of the process that answers the scrape (`controlplane/lib/loop_health.py`)."""
        labels = ["loop", "process"]
        up = GaugeMetricFamily(
            "controlplane_loop_up",
            "1 when the background loop is ok; 0 when failing, stalled or stopped",
            labels=labels,
        )
        failures = GaugeMetricFamily(
            "controlplane_loop_consecutive_failures", "Failures of the background loop in a row", labels=labels
        )
        success = GaugeMetricFamily(
            "controlplane_loop_last_success_timestamp_seconds", "When the background loop last succeeded", labels=labels
        )
        for record in loops_health():
            values = [record.loop, record.process]
            up.add_metric(values, 1.0 if record.state(now) == LoopState.OK else 0.0)
            failures.add_metric(values, float(record.failures))
            if record.last_success_at is not None:
                success.add_metric(values, record.last_success_at.timestamp())
        yield from (up, failures, success)

    def live_families(self):
        """Live-chart back-pressure of the process that answers the scrape (`controlplane/metrics/coalescing.py`)."""
        labels = ["process"]
        sent = CounterMetricFamily(
            "controlplane_live_samples_sent", "Live chart samples sent to browsers by this process", labels=labels
        )
        thinned = CounterMetricFamily(
            "controlplane_live_samples_thinned",
            "Live chart samples replaced by a newer one of the same node, pool or fleet before a slow browser could "
            "take them (this process)",
            labels=labels,
        )
        process = process_name()
        sent.add_metric([process], float(coalescing.counters["live_samples_sent"]))
        thinned.add_metric([process], float(coalescing.counters["live_samples_thinned"]))
        yield from (sent, thinned)


def _desired_hashes(version_ids) -> dict[int, str]:
    return {v.pk: v.content_hash for v in TemplateVersion.objects.filter(pk__in=version_ids)}


def exposition(*, now=None) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControlPlaneCollector(now=now))
    return generate_latest(registry)


def metrics_view(request):
    """GET /metrics: the exposition, for Prometheus (bearer key) or a signed-in user."""
    if not _allowed(request):
        status = 403 if request.user.is_authenticated else 401
        response = HttpResponse(f"{status}: send Authorization: Bearer <METRICS_API_KEY>\n", status=status)
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)


def _allowed(request) -> bool:
    key = settings.METRICS_API_KEY
    header = request.headers.get("Authorization", "")
    if key and header.startswith("Bearer "):
        return hmac.compare_digest(header[len("Bearer ") :].encode(), key.encode())
    user = request.user
    return bool(user and user.is_authenticated and user.can(Action.VIEW))
