"""What an alert rule may watch: a metric of the agents' samples, or a signal the control plane derives itself.

Each entry names the scopes it exists at, its unit, and the Prometheus series the control plane exports for it
(`/metrics`), which is also what `export_monitoring` writes PromQL over.
"""

from dataclasses import dataclass

NODE, POOL, FLEET = "node", "pool", "fleet"
SCOPES = (FLEET, POOL, NODE)


@dataclass(frozen=True)
class Signal:
    name: str
    label: str
    unit: str  # "s", "ratio", "count", "per_s", "flag"
    scopes: tuple[str, ...]
    prom_name: str  # without the `controlplane_<scope>_` prefix
    derived: bool = False  # computed by the control plane, not read from samples
    counter: bool = False  # exported as a Prometheus counter (`_total`)

    def prom_series(self, scope: str) -> str:
        return f"controlplane_{scope}_{self.prom_name}" + ("_total" if self.counter else "")


_ALL = (FLEET, POOL, NODE)

# Scalar metrics of the agents' sample (issue 5, contract A). Pool and fleet rows aggregate them.
SAMPLE_METRICS: tuple[Signal, ...] = (
    Signal("qps", "completed requests per second", "per_s", _ALL, "requests_per_second"),
    Signal("latency_p50_s", "P50 end-to-end latency", "s", _ALL, "latency_p50_seconds"),
    Signal("latency_p99_s", "P99 end-to-end latency", "s", _ALL, "latency_p99_seconds"),
    Signal("latency_p999_s", "P99.9 end-to-end latency", "s", _ALL, "latency_p999_seconds"),
    Signal("ttft_p50_s", "P50 time to first token", "s", _ALL, "ttft_p50_seconds"),
    Signal("ttft_p99_s", "P99 time to first token", "s", _ALL, "ttft_p99_seconds"),
    Signal("error_rate", "share of requests failed (5xx)", "ratio", _ALL, "error_ratio"),
    Signal("rejected_rate", "share of requests refused by admission", "ratio", _ALL, "rejected_ratio"),
    Signal("requests_running", "requests running in the engine", "count", _ALL, "requests_running"),
    Signal("requests_waiting", "requests waiting in the engine", "count", _ALL, "requests_waiting"),
    Signal("kv_cache_usage", "KV-cache usage", "ratio", _ALL, "kv_cache_usage_ratio"),
    Signal("queue_depth_short", "gateway short-request queue depth", "count", _ALL, "queue_depth_short"),
    Signal("queue_depth_long", "gateway long-context queue depth", "count", _ALL, "queue_depth_long"),
    Signal("batch_size_mean", "mean admitted batch size", "count", _ALL, "batch_size_mean"),
    Signal("batch_efficiency", "batch efficiency (seed definition)", "ratio", _ALL, "batch_efficiency_ratio"),
    Signal("batch_idle_ratio", "batch idle rate", "ratio", _ALL, "batch_idle_ratio"),
    Signal("spec_acceptance_rate", "speculative-decoding acceptance", "ratio", _ALL, "spec_acceptance_ratio"),
    Signal("spec_rejection_rate", "speculative-decoding rejection", "ratio", _ALL, "spec_rejection_ratio"),
    Signal("fragmentation_ratio", "GPU memory fragmentation", "ratio", _ALL, "memory_fragmentation_ratio"),
    Signal("gpu_util", "GPU utilisation", "ratio", _ALL, "gpu_utilization_ratio"),
    Signal("sm_util", "SM activity (DCGM)", "ratio", _ALL, "sm_utilization_ratio"),
    Signal("gpu_memory_used", "GPU memory used", "ratio", _ALL, "gpu_memory_used_ratio"),
    Signal("batch_timeout_rate", "requests past their batch timeout", "ratio", _ALL, "batch_timeout_ratio"),
    Signal("long_request_share", "share of requests above 1k tokens", "ratio", _ALL, "long_request_ratio"),
    Signal("degraded", "degradation mode on", "flag", _ALL, "degraded"),
    Signal(
        "intent_classified",
        "requests the intent classifier labelled (sample window)",
        "count",
        _ALL,
        "intent_classified",
    ),
    Signal(
        "intent_below_floor_share",
        "share of classified requests below the intent confidence floor",
        "ratio",
        _ALL,
        "intent_below_floor_ratio",
    ),
)

# Signals the evaluator derives from the node table and the samples' arrival (node scope), and from the pools'
# rollouts (pool scope).
NODE_LOST = Signal("node_lost", "node lost (1) or connected (0)", "flag", (NODE,), "lost", derived=True)
ENGINE_RESTARTS_10M = Signal(
    "engine_restarts_10m", "engine restarts in the last 10 minutes", "count", (NODE,), "engine_restarts", True, True
)
ROLLOUT_NACKED = Signal(
    "rollout_nacked", "node refused the pool's desired version", "flag", (NODE,), "rollout_nacked", derived=True
)
METRICS_STALE = Signal(
    "metrics_stale_s", "seconds since the node's last sample", "s", (NODE,), "metrics_age_seconds", derived=True
)
WARMUP_FAILED = Signal(
    "warmup_failed", "node's warmup failed within the last 10 minutes", "flag", (NODE,), "warmup_failed", derived=True
)
CANARY_ROLLED_BACK = Signal(
    "canary_rolled_back",
    "pool's canary was rolled back automatically within the last 10 minutes",
    "flag",
    (POOL,),
    "canary_rolled_back",
    derived=True,
)
# The trend detectors of the seed's two fault cases (controlplane/alerts/detectors.py).
BATCH_TIMEOUT_DROP = Signal(
    "batch_timeout_drop",
    "throughput drop while batch timeouts are exceeded (last minute against the five before)",
    "ratio",
    (NODE,),
    "batch_timeout_throughput_drop_ratio",
    derived=True,
)
GPU_MEMORY_LEAK = Signal(
    "gpu_memory_leak",
    "GPU memory used rising over the window while GPU utilisation falls (share of GPU memory)",
    "ratio",
    (NODE,),
    "gpu_memory_leak_rise_ratio",
    derived=True,
)
# The intent drift detector (controlplane/alerts/intent_drift.py): a pool's share of classified requests below the
# floor over the recent window, and its rise over the pool's own baseline.
INTENT_DRIFT_SHARE = Signal(
    "intent_drift_share",
    "share of classified requests below the intent confidence floor over the drift window (enough requests)",
    "ratio",
    (POOL,),
    "intent_drift_below_floor_ratio",
    derived=True,
)
INTENT_DRIFT_RISE = Signal(
    "intent_drift_rise",
    "rise of the share below the intent confidence floor over the pool's baseline (median of the hours before)",
    "ratio",
    (POOL,),
    "intent_drift_rise_ratio",
    derived=True,
)
DERIVED: tuple[Signal, ...] = (
    NODE_LOST, ENGINE_RESTARTS_10M, ROLLOUT_NACKED, METRICS_STALE, WARMUP_FAILED, CANARY_ROLLED_BACK,
    BATCH_TIMEOUT_DROP, GPU_MEMORY_LEAK, INTENT_DRIFT_SHARE, INTENT_DRIFT_RISE,
)  # fmt: skip

SIGNALS: dict[str, Signal] = {s.name: s for s in (*SAMPLE_METRICS, *DERIVED)}
SIGNAL_CHOICES = [(s.name, f"{s.name} — {s.label}") for s in SIGNALS.values()]

# A sample older than this counts as missing: the metric is unknown, not OK. Agents send one a second.
SAMPLE_FRESH_S = 10.0
# The window of `engine_restarts_10m`.
RESTART_WINDOW_S = 600.0
# How long a failed warmup keeps `warmup_failed` up: the node rolls back and warms up again within a minute or
# two, so the failure must outlive that for anyone to see it (it stays up while the node's last warmup failed).
WARMUP_FAILED_WINDOW_S = 600.0
# How long an automatic canary rollback keeps `canary_rolled_back` up: the pool is healthy again at once (its
# nodes are back on the previous version), so the fact has to stay visible long enough for someone to look.
CANARY_ROLLED_BACK_WINDOW_S = 600.0


def format_value(signal_name: str, value: float | None) -> str:
    """How the pages and notifications write a value of this signal."""
    if value is None:
        return "no data"
    signal = SIGNALS.get(signal_name)
    unit = signal.unit if signal else ""
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "ratio":
        return f"{value * 100:.1f} %"
    if unit == "flag":
        return "yes" if value >= 1 else "no"
    if unit == "per_s":
        return f"{value:.1f}/s"
    return f"{value:g}"


def format_threshold(signal_name: str, value: float | None) -> str:
    """A rule's threshold as people write it: `1.6 s`, `15 %`, `3`."""
    if value is None:
        return "—"
    unit = SIGNALS[signal_name].unit if signal_name in SIGNALS else ""
    if unit == "s":
        return f"{value:g} s"
    if unit == "ratio":
        return f"{round(value * 100, 4):g} %"
    if unit == "per_s":
        return f"{value:g}/s"
    return f"{value:g}"
