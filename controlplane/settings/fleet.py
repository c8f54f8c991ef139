"""The fleet's settings: where nodes' gateways may be, heartbeats, alert detectors, metric samples and history,
reviews, impact records, replays, log analyses, rollouts, tuning studies and alert notifications."""

from controlplane.lib.env import EnvError, env_int, env_list, env_str
from controlplane.lib.gateway_addresses import allowed_parse, ports_parse

# Where nodes' gateways may be (the control plane sends replays there): addresses, networks, host names, *.suffix.
# Empty: each node's gateway must be at the address its WebSocket came from (docs/security.md).
NODE_GATEWAY_ALLOWED = env_list("NODE_GATEWAY_ALLOWED", [])
NODE_GATEWAY_PORTS = env_list("NODE_GATEWAY_PORTS", [])
try:
    allowed_parse(NODE_GATEWAY_ALLOWED)
except ValueError as exc:
    raise EnvError(f"NODE_GATEWAY_ALLOWED: {exc}") from None
try:
    ports_parse(NODE_GATEWAY_PORTS)
except ValueError as exc:
    raise EnvError(f"NODE_GATEWAY_PORTS: {exc}") from None
# Engine-node agents: heartbeat period they are told to use, and silence after which a node counts as lost.
NODE_HEARTBEAT_S = env_int("NODE_HEARTBEAT_S", 2)
NODE_LOST_AFTER_S = env_int("NODE_LOST_AFTER_S", 10)

# Trend detectors of the seed's two fault cases (controlplane/alerts/detectors.py). The report gives symptoms, not
# windows: "Batch timeout exceeded" with a sharp throughput drop (the last minute against the five before it), and GPU
# utilisation falling while memory creeps up "slowly" (a least-squares trend over ten minutes). A point of each node's
# samples is kept every ALERT_TREND_POINT_S.
ALERT_TREND_POINT_S = env_int("ALERT_TREND_POINT_S", 10)
ALERT_BATCH_TIMEOUT_WINDOW_S = env_int("ALERT_BATCH_TIMEOUT_WINDOW_S", 60)
ALERT_BATCH_TIMEOUT_BASELINE_S = env_int("ALERT_BATCH_TIMEOUT_BASELINE_S", 300)
ALERT_LEAK_WINDOW_S = env_int("ALERT_LEAK_WINDOW_S", 600)
if min(ALERT_TREND_POINT_S, ALERT_BATCH_TIMEOUT_WINDOW_S, ALERT_BATCH_TIMEOUT_BASELINE_S, ALERT_LEAK_WINDOW_S) < 1:
    raise EnvError("ALERT_TREND_POINT_S and the ALERT_*_WINDOW_S / _BASELINE_S settings must be at least 1")
for _window in ("ALERT_BATCH_TIMEOUT_WINDOW_S", "ALERT_BATCH_TIMEOUT_BASELINE_S", "ALERT_LEAK_WINDOW_S"):
    if globals()[_window] < 3 * ALERT_TREND_POINT_S:
        raise EnvError(f"{_window} must hold at least three trend points (3 x ALERT_TREND_POINT_S)")

# Intent drift (controlplane/alerts/intent_drift.py): a pool's share of classified requests below the confidence floor
# over the last ALERT_INTENT_DRIFT_WINDOW_S against its median over the ALERT_INTENT_DRIFT_BASELINE_S before; judged
# only once the window holds ALERT_INTENT_DRIFT_MIN_REQUESTS classified requests (and the baseline as many).
ALERT_INTENT_DRIFT_WINDOW_S = env_int("ALERT_INTENT_DRIFT_WINDOW_S", 600)
ALERT_INTENT_DRIFT_BASELINE_S = env_int("ALERT_INTENT_DRIFT_BASELINE_S", 3 * 3600)
ALERT_INTENT_DRIFT_MIN_REQUESTS = env_int("ALERT_INTENT_DRIFT_MIN_REQUESTS", 200)
if min(ALERT_INTENT_DRIFT_WINDOW_S, ALERT_INTENT_DRIFT_BASELINE_S, ALERT_INTENT_DRIFT_MIN_REQUESTS) < 1:
    raise EnvError("ALERT_INTENT_DRIFT_WINDOW_S, _BASELINE_S and _MIN_REQUESTS must be at least 1")

# Seconds of requests each node sample's figures cover: the agents' ENGINE_NODE_SAMPLE_WINDOW_S, which must say the
# same (a sample with another window is refused, naming both). Shorter reacts faster and is noisier.
METRICS_SAMPLE_WINDOW_S = env_int("METRICS_SAMPLE_WINDOW_S", 10)
if not 1 <= METRICS_SAMPLE_WINDOW_S <= 300:
    raise EnvError("METRICS_SAMPLE_WINDOW_S must be 1 to 300 seconds (the agents' ENGINE_NODE_SAMPLE_WINDOW_S)")
# Live charts: sample frames a browser connection may leave unconfirmed before this process keeps only the newest per
# node, pool and the fleet (controlplane/metrics/coalescing.py). Tests of a tab falling behind set fewer.
METRICS_LIVE_UNCONFIRMED_FRAMES = env_int("METRICS_LIVE_UNCONFIRMED_FRAMES", 8)
if METRICS_LIVE_UNCONFIRMED_FRAMES < 1:
    raise EnvError("METRICS_LIVE_UNCONFIRMED_FRAMES must be at least 1")
# Metric history: 1 s rows are kept this long (charts up to an hour), 60 s rows this long (up to a week).
METRICS_RAW_RETENTION_S = env_int("METRICS_RAW_RETENTION_S", 3600)
METRICS_ROLLUP_RETENTION_S = env_int("METRICS_ROLLUP_RETENTION_S", 7 * 24 * 3600)
if METRICS_RAW_RETENTION_S < 120 or METRICS_ROLLUP_RETENTION_S < 3600:
    raise EnvError("METRICS_RAW_RETENTION_S must be at least 120 and METRICS_ROLLUP_RETENTION_S at least 3600")

# The review queue: a pending message no gateway has sampled again for this long is deleted (the way customers
# write it has moved on; the queue stays a list a reviewer can finish). Labelled messages are kept: they are
# training data, and a reviewer's hour adds a few hundred at most.
REVIEW_PENDING_RETENTION_S = env_int("REVIEW_PENDING_RETENTION_S", 14 * 24 * 3600)
if REVIEW_PENDING_RETENTION_S < 3600:
    raise EnvError("REVIEW_PENDING_RETENTION_S must be at least 3600")

# Impact records: the pool's figures this long before and after each change are compared (10 min each by default,
# long enough for some 60 independent 10 s sample windows per side); a load shift beyond the tolerance (after/before
# QPS) or fewer 1 s samples than the minimum per window leaves the change "inconclusive", never credited.
IMPACT_WINDOW_BEFORE_S = env_int("IMPACT_WINDOW_BEFORE_S", 600)
IMPACT_WINDOW_AFTER_S = env_int("IMPACT_WINDOW_AFTER_S", 600)
# The after-window starts this long after the change (cold restarts, and the agents' 10 s sample windows refilling).
IMPACT_SETTLE_S = env_int("IMPACT_SETTLE_S", 30)
IMPACT_LOAD_TOLERANCE_PCT = env_int("IMPACT_LOAD_TOLERANCE_PCT", 15)
IMPACT_MIN_SAMPLES = env_int("IMPACT_MIN_SAMPLES", 60)
if min(IMPACT_WINDOW_BEFORE_S, IMPACT_WINDOW_AFTER_S) < 10 or IMPACT_MIN_SAMPLES < 5:
    raise EnvError("IMPACT_WINDOW_BEFORE_S, IMPACT_WINDOW_AFTER_S must be at least 10, IMPACT_MIN_SAMPLES at least 5")
if IMPACT_WINDOW_BEFORE_S + IMPACT_SETTLE_S + IMPACT_WINDOW_AFTER_S > METRICS_RAW_RETENTION_S / 2:
    raise EnvError(
        "IMPACT_WINDOW_BEFORE_S + IMPACT_SETTLE_S + IMPACT_WINDOW_AFTER_S must be at most half of "
        "METRICS_RAW_RETENTION_S (the before-window must still be there when the record is measured)"
    )

# Replay runs: caps that keep a replay from becoming a load test of the fleet (the report's tuned deployment served
# 53 QPS; 500 is ten times that), how fast one share (one event loop in one worker) is asked to send, and how long
# a run waits for its nodes to accept its client key and for one reply.
REPLAY_MAX_QPS = env_int("REPLAY_MAX_QPS", 500)
REPLAY_MAX_REQUESTS = env_int("REPLAY_MAX_REQUESTS", 200_000)
REPLAY_MAX_DURATION_S = env_int("REPLAY_MAX_DURATION_S", 4 * 3600)
REPLAY_SHARE_QPS = env_int("REPLAY_SHARE_QPS", 100)
REPLAY_MAX_SHARES = env_int("REPLAY_MAX_SHARES", 16)
REPLAY_KEY_WAIT_S = env_int("REPLAY_KEY_WAIT_S", 30)
REPLAY_REQUEST_TIMEOUT_S = env_int("REPLAY_REQUEST_TIMEOUT_S", 120)
# The Celery queue replay tasks go to (empty: the default queue). A share holds its worker for the whole run, so
# production deployments give replays workers of their own (`celery worker -Q replays`) and set this.
REPLAY_TASK_QUEUE = env_str("REPLAY_TASK_QUEUE")

# Conversation log analyses: a running analysis that has not reported progress for this long is failed (its worker
# stopped); progress comes about every second, a 100,000-conversation log takes tens of seconds.
LOG_ANALYSIS_STALL_S = env_int("LOG_ANALYSIS_STALL_S", 300)

# Canary rollouts: how long a stage's nodes may take to ACK the new version (a cold change restarts vLLM, loads the
# model and warms it up) before the stage fails and the pool goes back; a lost push or a hung engine never holds a
# rollout (and with it every other publish to the pool) for ever.
ROLLOUT_APPLY_TIMEOUT_S = env_int("ROLLOUT_APPLY_TIMEOUT_S", 1800)

# Tuning studies: the most trials one study may ask for, how long a trial waits for the pool's nodes to ACK its
# candidate (a cold field restarts vLLM and warms it up first), and the queue the study task goes to. A study's task
# waits for its replays' shares for its whole run, so it needs a worker besides theirs.
TUNING_MAX_TRIALS = env_int("TUNING_MAX_TRIALS", 200)
TUNING_APPLY_TIMEOUT_S = env_int("TUNING_APPLY_TIMEOUT_S", 600)
TUNING_TASK_QUEUE = env_str("TUNING_TASK_QUEUE")
# A running study silent this long (no progress written; it writes every 10 s, also while it waits for ACKs and
# replays) lost its worker: it is failed, its trial too, and its pool goes back to the version it ran before.
TUNING_STALL_S = env_int("TUNING_STALL_S", 300)

# Alerting: where incident notifications go (Alertmanager's webhook format; empty: none), the key Prometheus
# scrapes /metrics with, and the address links in notifications and exported rules point at.
ALERT_WEBHOOK_URL = env_str("ALERT_WEBHOOK_URL")
METRICS_API_KEY = env_str("METRICS_API_KEY")
CONTROLPLANE_EXTERNAL_URL = env_str("CONTROLPLANE_EXTERNAL_URL", "http://127.0.0.1:8000").rstrip("/")
