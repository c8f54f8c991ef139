"""Redis and what rides on it: the channel layer, Celery (broker, eager mode, the periodic schedule) and the cache.
Without REDIS_URL everything stays in the process (the embedded mode)."""

from controlplane.lib.env import env_bool, env_int, env_str

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # A rollout or reconnect storm opens one pooled connection per concurrent group operation;
                # redis-py fails at once (not waits) when its pool is exhausted.
                # redis-py 8 times reads out after 5 s by default, exactly channels_redis's blocking receive
                # (BZPOPMIN, 5 s): once the layer is idle for 5 s, a consumer's receive raised and its socket closed.
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "max_connections": env_int("CHANNELS_REDIS_MAX_CONNECTIONS", 1024),
                        "socket_timeout": 15,
                    }
                ],
                "prefix": env_str("CHANNELS_PREFIX", "cp"),
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
# Without a broker, tasks run in the calling process so the embedded mode needs no worker.
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_BEAT_SCHEDULE: dict = {
    # Every minute: the minute that just ended becomes one 60 s row per node, pool and the fleet; a missed run is
    # caught up by the next one.
    "metrics-roll-up": {"task": "controlplane.metrics.tasks.metrics_roll_up_task", "schedule": 60.0},
    # Every minute: 1 s rows older than an hour go each minute; deleting more often only makes smaller deletes.
    "metrics-expire": {"task": "controlplane.metrics.tasks.metrics_expire_task", "schedule": 60.0},
    # Every 2 s: a rule's `for` is counted in seconds (P99's is 10 s) and node lost must show within its window;
    # one pass is a handful of queries whatever the fleet's size, and a lease keeps overlapping passes out.
    "alerts-evaluate": {
        "task": "controlplane.alerts.tasks.alerts_evaluate",
        "schedule": float(env_int("ALERT_EVALUATE_EVERY_S", 2)),
        "options": {"expires": 10},
    },
    # Every 2 s: a canary stage's window is seconds to minutes long and a failing canary should be rolled back
    # within a couple of seconds of its window closing; a pass is a few queries per running rollout.
    "rollouts-analyse": {
        "task": "controlplane.nodes.tasks.rollouts_analyse_task",
        "schedule": 2.0,
        "options": {"expires": 10},
    },
    # Every 5 s: the production gate's soak windows are minutes long (Pool.soak_s, 300 s by default) and the alert
    # history covers what happens between passes; a pass is a few queries and one UPDATE for all healthy runs.
    "version-runs-watch": {
        "task": "controlplane.nodes.tasks.version_runs_watch_task",
        "schedule": 5.0,
        "options": {"expires": 10},
    },
    # Every 5 s: a cleanup lease whose end was never reported (a lost message, a crashed consumer) expires after
    # cleanup.max_duration_s + 30 s; checking it only when another cleanup event happened left pools waiting forever.
    "cleanups-dispatch": {
        "task": "controlplane.nodes.tasks.cleanups_dispatch_due_task",
        "schedule": 5.0,
        "options": {"expires": 10},
    },
    # Every 30 s: a replay whose worker died would stay "running" for ever; overdue means minutes late (the request
    # timeout plus a minute past its schedule), so a slower pass changes nothing that matters.
    "replays-reap": {
        "task": "controlplane.replays.tasks.replay_runs_reap_task",
        "schedule": 30.0,
        "options": {"expires": 60},
    },
    # Every 30 s: a log analysis reports progress about every second; one silent for LOG_ANALYSIS_STALL_S (its worker
    # stopped, or the embedded process restarted) would stay "running" for ever.
    "log-analyses-reap": {
        "task": "controlplane.convlogs.tasks.log_analyses_reap_task",
        "schedule": 30.0,
        "options": {"expires": 60},
    },
    # Every 30 s: a running tuning study writes progress every 10 s; one silent for TUNING_STALL_S (its worker
    # stopped, or the embedded process restarted) would stay "running" for ever and keep its pool from another study.
    "tuning-studies-reap": {
        "task": "controlplane.tuning.tasks.tuning_studies_reap_task",
        "schedule": 30.0,
        "options": {"expires": 60},
    },
    # Every 15 s: an impact record's after-window is minutes long; measuring up to 15 s after it closed changes
    # nothing, and a pass reads only the records whose window has passed.
    "impact-measure": {
        "task": "controlplane.impact.tasks.impact_records_measure_task",
        "schedule": 15.0,
        "options": {"expires": 30},
    },
    "reviews-expire": {
        "task": "controlplane.reviews.tasks.review_items_expire_task",
        "schedule": 3600.0,
        "options": {"expires": 600},
    },
    # Every second: samples arrive at 1 Hz and a node without one for 5 s counts as saturated, so a slower pass
    # would blur both; a transition's bundle then reaches the agents within a second. A pass is a few queries
    # and one small row update per pool.
    "degradation-evaluate": {
        "task": "controlplane.operations.tasks.degradation_evaluate_task",
        "schedule": 1.0,
        "options": {"expires": 5},
    },
}

# Cache: the API's throttle counters. Shared through Redis when there is one, so every ASGI process counts the same
# requests; per process (in memory) in the embedded mode.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env_str("CHANNELS_PREFIX", "cp") + "-cache",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
