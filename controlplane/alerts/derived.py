"""What a pass reads, and the signals it derives itself: node lost, restarts, NACKs, stale metrics, failed warmups,
rolled-back canaries, the trend detectors of the seed's two fault cases and the pools' intent drift.

`PassInputs` reads each input at most once per pass and only when a rule needs it, so a pass costs a fixed number of
queries whatever the fleet's size. `entities()` gives (name, pool, value) for every entity of a rule's scope; value
is a number, None (nothing to measure: not holding), UNKNOWN (no fresh sample: not the same as OK) or NoSource (a
null figure the node has no source for: coverage.py).
"""

from datetime import datetime, timedelta

from django.conf import settings

from controlplane.alerts import detectors, intent_drift, signals
from controlplane.alerts.coverage import no_source
from controlplane.alerts.models import AlertRuleVersion, NodeRestartTrack
from controlplane.metrics import selectors as metrics
from controlplane.nodes.models import EngineNode, Pool, Rollout

UNKNOWN = object()  # no fresh sample: the value is unknown, which is not the same as OK


class PassInputs:
    """The inputs of one pass at `now`, each loaded on first use."""

    def __init__(self, now: datetime):
        self.now = now
        self._cache: dict[str, object] = {}

    def _once(self, key: str, load):
        if key not in self._cache:
            self._cache[key] = load()
        return self._cache[key]

    def latest(self, scope: str) -> dict[str, dict]:
        return self._once(
            f"latest.{scope}",
            lambda: metrics.latest_values(scope=scope, max_age_s=signals.SAMPLE_FRESH_S, now=self.now),
        )

    def nodes(self) -> list[dict]:
        fields = (
            "name", "pool__name", "is_connected", "last_seen_at", "connected_at", "token_hash",
            "applied_hash", "last_nack_hash", "warmup_state", "warmup_failed_at",
        )  # fmt: skip
        return self._once("nodes", lambda: list(EngineNode.objects.values(*fields)))

    def pools(self) -> list[str]:
        return self._once("pools", lambda: list(Pool.objects.values_list("name", flat=True)))

    def desired_hashes(self) -> dict[str, str]:
        def load():
            pools = Pool.objects.filter(desired_version__isnull=False).select_related("desired_version")
            return {p.name: p.desired_version.content_hash for p in pools}

        return self._once("desired", load)

    def last_samples(self) -> dict[str, datetime]:
        return self._once("last_sample_at", lambda: metrics.last_sample_at(now=self.now))

    def entities(self, version: AlertRuleVersion):
        """(name, pool, value) for every entity of the rule's scope; value may be None (not holding), UNKNOWN or
        NoSource (coverage.py: a null figure the node has no source for)."""
        metric, scope = version.metric, version.scope
        signal = signals.SIGNALS.get(metric)
        if signal is None:
            return
        if not signal.derived:
            latest = self.latest(scope)
            if scope == signals.NODE:
                names = [(n["name"], n["pool__name"]) for n in self.nodes()]
            elif scope == signals.POOL:
                names = [(p, p) for p in self.pools()]
            else:
                names = [("fleet", "")]
            for name, pool in names:
                values = latest.get(name)
                if values is None:
                    yield name, pool, UNKNOWN
                else:
                    yield name, pool, no_source(values, metric, scope) or _number(values.get(metric))
            return
        if metric == signals.NODE_LOST.name:
            for node in self.nodes():
                # A node that never connected is not lost, it is not deployed yet; a revoked one was cut off on purpose.
                if node["token_hash"] and (node["connected_at"] or node["last_seen_at"]):
                    yield node["name"], node["pool__name"], 1.0 if node_is_lost(node, self.now) else 0.0
        elif metric == signals.METRICS_STALE.name:
            last = self.last_samples()
            for node in self.nodes():
                if not node["token_hash"] or node_is_lost(node, self.now):
                    continue  # a lost node is node-lost's business, not a second page
                seen = [t for t in (last.get(node["name"]), node["connected_at"]) if t is not None]
                if seen:
                    yield node["name"], node["pool__name"], (self.now - max(seen)).total_seconds()
        elif metric == signals.ROLLOUT_NACKED.name:
            desired = self.desired_hashes()
            for node in self.nodes():
                want = desired.get(node["pool__name"])
                if want:
                    nacked = node["last_nack_hash"] == want and node["applied_hash"] != want
                    yield node["name"], node["pool__name"], 1.0 if nacked else 0.0
        elif metric == signals.WARMUP_FAILED.name:
            for node in self.nodes():
                if node["token_hash"]:
                    yield node["name"], node["pool__name"], 1.0 if warmup_failed(node, self.now) else 0.0
        elif metric == signals.CANARY_ROLLED_BACK.name:
            rolled_back = self._once("rolled_back", lambda: canary_rolled_back_pools(self.now))
            for pool in self.pools():
                yield pool, pool, 1.0 if pool in rolled_back else 0.0
        elif metric == signals.ENGINE_RESTARTS_10M.name:
            increases = self._once("restarts", self.track_restarts)
            for node in self.nodes():
                yield node["name"], node["pool__name"], increases.get(node["name"], UNKNOWN)
        elif metric in intent_drift.SIGNAL_NAMES:
            drift = self._once("intent_drift", lambda: intent_drift.drift_by_pool(now=self.now))
            for pool in self.pools():
                yield pool, pool, (drift.get(pool) or {}).get(metric)
        elif metric in detectors.DETECTED:
            values = self._once("trends", self.track_trends)
            for node in self.nodes():
                found = values.get(node["name"])
                yield node["name"], node["pool__name"], UNKNOWN if found is None else found.get(metric)

    def track_restarts(self) -> dict[str, float]:
        """Per node, the engine-restart counter's increase over the window (a reset counts from zero)."""
        latest = self.latest(signals.NODE)
        tracks = {t.node: t for t in NodeRestartTrack.objects.all()}
        horizon = self.now.timestamp() - signals.RESTART_WINDOW_S
        created, changed, result = [], [], {}
        for name, values in latest.items():
            value = values.get("engine_restarts")
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            value = int(value)
            track = tracks.get(name)
            if track is None:
                # First sight: the counter's history before now is unknown, so it is the baseline.
                created.append(NodeRestartTrack(node=name, value=value, increases=[]))
                result[name] = 0.0
                continue
            increases = [item for item in track.increases if item[0] >= horizon]
            rise = value - track.value if value >= track.value else value
            if rise > 0:
                increases.append([self.now.timestamp(), rise])
            if rise or increases != track.increases or value != track.value:
                track.value, track.increases = value, increases
                changed.append(track)
            result[name] = float(sum(item[1] for item in increases))
        if created:
            NodeRestartTrack.objects.bulk_create(created, ignore_conflicts=True)
        if changed:
            NodeRestartTrack.objects.bulk_update(changed, ["value", "increases"])
        return result

    def track_trends(self) -> dict[str, dict[str, float | None]]:
        """Per node with a fresh sample, the trend detectors' values (controlplane/alerts/detectors.py)."""
        return detectors.trends_update(latest=self.latest(signals.NODE), now=self.now)


def _number(value):
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, int | float) else None


def warmup_failed(node: dict, now: datetime) -> bool:
    """The node's last warmup failed, or one failed within the window (a rollback's passing warmup follows fast)."""
    failed_at = node["warmup_failed_at"]
    recent = failed_at is not None and (now - failed_at).total_seconds() < signals.WARMUP_FAILED_WINDOW_S
    return node["warmup_state"] == "failed" or recent


def canary_rolled_back_pools(now: datetime) -> set[str]:
    """Pools whose canary analysis failed and was rolled back automatically within the window."""
    since = now - timedelta(seconds=signals.CANARY_ROLLED_BACK_WINDOW_S)
    rollouts = Rollout.objects.filter(state=Rollout.State.ROLLED_BACK, finished_at__gte=since)
    return set(rollouts.values_list("pool__name", flat=True))


def node_is_lost(node: dict, now: datetime) -> bool:
    """EngineNode.is_lost on a values() row."""
    if not node["is_connected"] or node["last_seen_at"] is None:
        return True
    return (now - node["last_seen_at"]).total_seconds() > settings.NODE_LOST_AFTER_S
