"""The default rule pack: the seed's monitoring thresholds ("监控阈值建议") plus the fleet's own failure signals.

Installed once by a data migration as version 1 of each rule (author: none, the system); SREs edit from there.

`for_s` choices:
- P99 latency, 10 s: the agent's p99 is already over a 10 s sliding window, so one burst of slow requests lifts it
  for at most one window; staying above the line for another 10 s is a sustained regression. Firing within ~20 s
  of onset is what a 2 s SLO during a sales festival needs.
- Batch idle and spec-decode rejection, 30 s: both swing with the request mix second by second; half a minute is
  a trend, and neither hurts users within that time.
- Fragmentation and long requests, 60 s: slow-moving by nature (memory layout, traffic mix); the response
  (clean-up, routing long requests to their queue) is not urgent by the second.
- Node lost, engine restarts, rollout NACKed, metrics stale: 0 s. Each is already a debounced fact (the node was
  silent for NODE_LOST_AFTER_S, the counter rose three times, the node refused the version, no sample for 10 s).
- Warmup failed, 0 s: one failed health check over the first requests of a warmup is the fact (the node has
  already rolled back); the signal stays up 10 minutes after it so the alert is seen (alerts/signals.py).
- Pool degraded, 0 s: degradation is entered with its own hysteresis (controlplane/operations/degradation.py);
  the pool's `degraded` figure is the number of its nodes running the degraded bundle.
- Batch timeout, 10 s: its value already compares a minute with the five before it (controlplane/alerts/
  detectors.py); ten more seconds keep one pass's wobble from paging. The seed says "骤降" (a sharp drop) without a
  figure: 30 % of the node's throughput lost while its batches time out is a warning, half of it critical.
- GPU memory leak, 30 s: a least-squares trend over ten minutes is its own debounce; half a minute more costs nothing
  against a leak that takes hours. Warning at 2 % of GPU memory gained in the window while utilisation fell by 10
  points or more (on an 80 GB card, 1.6 GB in ten minutes: vLLM's reservation leaves ~10 % headroom, gone in under
  an hour at that rate), critical at 5 %.
- Intent drift and intent unsure, 60 s: their values already cover ten minutes of the pool's classified requests
  (controlplane/alerts/intent_drift.py), and the response (look at the review queue, retrain) takes hours; a
  minute more keeps one pass's wobble from paging. Drift: the share below the confidence floor 10 points above the
  pool's own median of the three hours before is a warning (at the seed's 50 QPS that is some 3,000 more requests in
  ten minutes served at the default temperature), 20 points critical. Unsure: whatever the baseline, once 30 % of a
  pool's classified requests fall below the floor the classifier is not steering the tiers for nearly a third of
  the traffic; a pool that has always been there has no drift to show, so the absolute line catches it.
- Canary rolled back, 0 s: the rollout's analysis window already is the debounce (controlplane/nodes/services/
  rollouts.py); the signal stays up 10 minutes after the rollback so the alert is seen (alerts/signals.py).
"""

DEFAULT_RULES: tuple[dict, ...] = (
    {
        "name": "p99-latency",
        "metric": "latency_p99_s",
        "scope": "node",
        "comparison": "gt",
        "warn": 1.6,
        "critical": 2.0,
        "for_s": 10,
        "runbook": "p99-latency",
        "summary": "P99 end-to-end latency above the SLO line (seed: 1.6 s warning, 2.0 s critical)",
    },
    {
        "name": "batch-idle",
        "metric": "batch_idle_ratio",
        "scope": "node",
        "comparison": "gt",
        "warn": 0.15,
        "critical": 0.25,
        "for_s": 30,
        "runbook": "batch-idle",
        "summary": "Batches run idle (批处理空跑率): seed 15 % warning, 25 % critical",
    },
    {
        "name": "spec-decode-rejection",
        "metric": "spec_rejection_rate",
        "scope": "node",
        "comparison": "gt",
        "warn": 0.40,
        "critical": 0.60,
        "for_s": 30,
        "runbook": "spec-decode-rejection",
        "summary": "Speculative decoding rejects the draft's tokens (推测解码拒绝率): seed 40 % / 60 %",
    },
    {
        "name": "memory-fragmentation",
        "metric": "fragmentation_ratio",
        "scope": "node",
        "comparison": "gt",
        "warn": 0.20,
        "critical": 0.35,
        "for_s": 60,
        "runbook": "memory-fragmentation",
        "summary": "GPU memory fragmentation (显存碎片率): seed 20 % warning, 35 % critical",
    },
    {
        "name": "long-requests",
        "metric": "long_request_share",
        "scope": "pool",
        "comparison": "gt",
        "warn": 0.05,
        "critical": None,
        "for_s": 60,
        "runbook": "long-requests",
        "summary": "More than 5 % of a pool's requests are above 1k tokens (seed: >1k tokens 请求超 5%)",
    },
    {
        "name": "node-lost",
        "metric": "node_lost",
        "scope": "node",
        "comparison": "ge",
        "warn": 1,
        "critical": 1,
        "for_s": 0,
        "runbook": "node-lost",
        "summary": "Node lost: no connection, or no heartbeat for NODE_LOST_AFTER_S",
    },
    {
        "name": "engine-restarting",
        "metric": "engine_restarts_10m",
        "scope": "node",
        "comparison": "ge",
        "warn": 3,
        "critical": 6,
        "for_s": 0,
        "runbook": "engine-restarting",
        "summary": "The engine restarted 3 times or more within 10 minutes (6: critical)",
    },
    {
        "name": "rollout-nacked",
        "metric": "rollout_nacked",
        "scope": "node",
        "comparison": "ge",
        "warn": 1,
        "critical": None,
        "for_s": 0,
        "runbook": "rollout-nacked",
        "summary": "A node refused (NACKed) its pool's desired version and keeps running the old one",
    },
    {
        "name": "metrics-stale",
        "metric": "metrics_stale_s",
        "scope": "node",
        "comparison": "gt",
        "warn": 10,
        "critical": None,
        "for_s": 0,
        "runbook": "metrics-stale",
        "summary": "A connected node sent no metric sample for more than 10 s",
    },
    {
        "name": "pool-degraded",
        "metric": "degraded",
        "scope": "pool",
        "comparison": "ge",
        "warn": 1,
        "critical": None,
        "for_s": 0,
        "runbook": "pool-degraded",
        "summary": "The pool runs degraded (temperature 0.7, max_tokens 128): its nodes report the degraded bundle",
    },
    {
        "name": "warmup-failed",
        "metric": "warmup_failed",
        "scope": "node",
        "comparison": "ge",
        "warn": 1,
        "critical": None,
        "for_s": 0,
        "runbook": "warmup-failed",
        "summary": "A node's warmup failed its health check (P99 or errors over the first requests) and it rolled back",
    },
    {
        "name": "canary-rolled-back",
        "metric": "canary_rolled_back",
        "scope": "pool",
        "comparison": "ge",
        "warn": 1,
        "critical": None,
        "for_s": 0,
        "runbook": "canary-rolled-back",
        "summary": "A canary failed its analysis (P99, errors or spec-decode acceptance) and was rolled back",
    },
    {
        "name": "batch-timeout",
        "metric": "batch_timeout_drop",
        "scope": "node",
        "comparison": "ge",
        "warn": 0.30,
        "critical": 0.50,
        "for_s": 10,
        "runbook": "batch-timeout-exceeded",
        "summary": "Batch timeout exceeded with a throughput drop (seed fault case 1, 批量超时): share of QPS lost",
    },
    {
        "name": "intent-drift",
        "metric": "intent_drift_rise",
        "scope": "pool",
        "comparison": "ge",
        "warn": 0.10,
        "critical": 0.20,
        "for_s": 60,
        "runbook": "intent-drift",
        "summary": "More of the pool's requests fall below the intent confidence floor than usual (rise over its "
        "baseline): traffic the classifier has not learnt",
    },
    {
        "name": "intent-unsure",
        "metric": "intent_drift_share",
        "scope": "pool",
        "comparison": "ge",
        "warn": 0.30,
        "critical": None,
        "for_s": 60,
        "runbook": "intent-drift",
        "summary": "30 % or more of the pool's classified requests fall below the intent confidence floor",
    },
    {
        "name": "gpu-memory-leak",
        "metric": "gpu_memory_leak",
        "scope": "node",
        "comparison": "ge",
        "warn": 0.02,
        "critical": 0.05,
        "for_s": 30,
        "runbook": "gpu-memory-leak",
        "summary": "GPU utilisation falling while memory used creeps up (seed fault case 2, 显存泄漏): memory gained",
    },
)

DEFAULT_COMMENT = "default pack: the seed's monitoring thresholds and the fleet's failure signals"


def install_default_rules(rule_model, version_model) -> int:
    """Create each default rule that does not exist yet (by name); returns how many were created.

    Takes the model classes so the data migration can pass its historical models and `seed_demo` the real ones.
    """
    created = 0
    for spec in DEFAULT_RULES:
        fields = dict(spec)
        name = fields.pop("name")
        if rule_model.objects.filter(name=name).exists():
            continue
        rule = rule_model.objects.create(name=name, latest_number=1)
        version_model.objects.create(rule=rule, number=1, comment=DEFAULT_COMMENT, is_enabled=True, **fields)
        created += 1
    return created
