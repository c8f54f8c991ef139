"""Django settings, read from the environment with embedded defaults (SQLite, in-memory layer, eager tasks)."""

import re
from datetime import timedelta
from pathlib import Path

import dj_database_url

from controlplane.lib.env import EnvError, env_bool, env_int, env_list, env_str, weak_secret_key
from controlplane.lib.gateway_addresses import allowed_parse, ports_parse

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("CONTROLPLANE_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DJANGO_DEBUG", False)
DATABASE_URL = env_str("DATABASE_URL")
# Embedded mode only: a fixed key so sessions survive restarts of `make run`. It is public (it is in this file), so
# whoever has it can forge session cookies and password-reset links: refused wherever real data lives.
EMBEDDED_SECRET_KEY = "embedded-insecure-key-set-DJANGO_SECRET_KEY-in-production"
SECRET_KEY = env_str("DJANGO_SECRET_KEY")
_WEAK_KEY = weak_secret_key(SECRET_KEY, public_keys=(EMBEDDED_SECRET_KEY,))
if DATABASE_URL and not DATABASE_URL.lower().startswith("sqlite") and _WEAK_KEY:
    raise EnvError(
        f"DJANGO_SECRET_KEY: a key of one's own is required when DATABASE_URL points at a database server "
        f"({_WEAK_KEY}); set it to a long random value (e.g. python -c 'import secrets; "
        "print(secrets.token_urlsafe(50))'), the same on every process"
    )
if not SECRET_KEY:
    if not DEBUG and env_bool("DJANGO_REQUIRE_SECRET_KEY", False):
        raise EnvError("DJANGO_SECRET_KEY: required when DJANGO_REQUIRE_SECRET_KEY is on")
    SECRET_KEY = EMBEDDED_SECRET_KEY

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "axes",
    "controlplane.accounts",
    "controlplane.audit",
    "controlplane.catalog",
    "controlplane.params",
    "controlplane.nodes",
    "controlplane.datasets",
    "controlplane.reviews",
    "controlplane.convlogs",
    "controlplane.operations",
    "controlplane.metrics",
    "controlplane.alerts",
    "controlplane.replays",
    "controlplane.tuning",
    "controlplane.impact",
    "controlplane.advice",
    "controlplane.dashboard",
]

MIDDLEWARE = [
    "controlplane.lib.request_id.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "controlplane.dashboard.middleware.DomainErrorPageMiddleware",
    # Last: it turns a login refused for a locked-out client into the lockout answer (429).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "controlplane.accounts.context_processors.role",
                "controlplane.operations.context_processors.degradation_banner",
            ],
        },
    },
]

if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    # Embedded mode has many writers in one process (agent messages, sample batches, periodic passes, requests).
    # WAL: readers never wait for the writer, nor it for them. IMMEDIATE: every `transaction.atomic()` takes the
    # write lock at BEGIN, where SQLite waits up to `timeout` for it; a deferred transaction that read first fails
    # at once with "database is locked" when it tries to write while another writer holds the lock (SQLite cannot
    # wait there without risking a deadlock), and `select_for_update` is a no-op on SQLite. So write transactions
    # are serialised whole, as the row locks are on Postgres. synchronous=NORMAL is safe in WAL: a power cut can
    # lose the last commits, never corrupt the file. See docs/embedded-mode.md.
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "controlplane.sqlite3",
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "accounts.User"
# django-axes counts failed logins (dashboard form, Django admin, POST /api/v1/auth/token/) per user name and client
# address, and refuses that pair for a while after too many; its backend goes first so a locked pair is refused before
# the password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("LOGIN_LOCKOUT_S", 900))
# The pair, not the address alone: colleagues behind one NAT are not locked out by one person's typos.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
# No start-up banner or per-attempt log lines; lockouts are still logged as warnings.
AXES_VERBOSE = False
if AXES_FAILURE_LIMIT < 1 or AXES_COOLOFF_TIME.total_seconds() < 1:
    raise EnvError("LOGIN_FAILURE_LIMIT and LOGIN_LOCKOUT_S must be at least 1")
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "dashboard:login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "dashboard:login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("DJANGO_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Plotly's bundle comes from the pinned `plotly` package (served as vendor/plotly/plotly.min.js), never a CDN.
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "controlplane.dashboard.staticfinders.PlotlyFinder",
]
# Serve straight from the finders when collectstatic has not run (tests, first start).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

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


def _rate(name: str, default: str) -> str:
    """A throttle rate `N/second|minute|hour|day` (DRF's and the `limits` package's common form)."""
    value = env_str(name, default).strip()
    if not re.fullmatch(r"[1-9][0-9]*/(second|minute|hour|day)", value):
        raise EnvError(f"{name}: expected a rate like 60/minute (per second, minute, hour or day); got {value!r}")
    return value


# REST API throttling (controlplane/lib/throttling.py): anonymous requests that reach a view open to them (the token
# endpoint) per client address, and signed-in requests per user. Requests refused by authentication or permissions
# are not counted.
API_THROTTLE_ANON = _rate("API_THROTTLE_ANON", "60/minute")
API_THROTTLE_USER = _rate("API_THROTTLE_USER", "1200/minute")
# Agents' WebSocket: failed node-token attempts per client address before that address is refused for the rest of
# the window (valid tokens included), counted by the `limits` package in Redis (in memory without it).
AGENT_AUTH_FAILURE_RATE = _rate("AGENT_AUTH_FAILURE_RATE", "10/minute")

REST_FRAMEWORK = {
    "DEFAULT_THROTTLE_CLASSES": [
        "controlplane.lib.throttling.AnonRateThrottle",
        "controlplane.lib.throttling.UserRateThrottle",
    ],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.accounts.permissions.HasRole"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": env_int("API_PAGE_SIZE", 50),
    "DEFAULT_FILTER_BACKENDS": ["controlplane.lib.filters.FilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "controlplane.lib.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "controlplane.lib.api_errors.exception_handler",
    # `?format=yaml|json` names the export format; DRF must not read it as a renderer override.
    "URL_FORMAT_OVERRIDE": None,
    "DEFAULT_PARSER_CLASSES": [
        "controlplane.lib.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Inference control plane API",
    "DESCRIPTION": "Parameter templates, whitelists, pools, rollouts and the audit log.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Requests and responses get components of their own: read-only fields (ids, times) are not asked for,
    # write-only ones (passwords) are never shown.
    "COMPONENT_SPLIT_REQUEST": True,
    # Choice sets that share a field name get names that say which one they are.
    "ENUM_NAME_OVERRIDES": {
        "DocumentFormatEnum": "controlplane.params.codec.FORMATS",
        "UploadFormatEnum": "controlplane.datasets.uploads.FORMATS",
        "WarmupSourceEnum": "controlplane.datasets.models.WarmupDatasetVersion.Source",
        "AlertStateEnum": "controlplane.alerts.models.Alert.State",
        "IncidentStateEnum": "controlplane.alerts.models.AlertGroup.State",
        "IntentModelStatusEnum": "controlplane.datasets.models.IntentModel.Status",
        "ClientKeyKindEnum": "controlplane.nodes.models.ClientKey.Kind",
        "ConversationLogSourceEnum": "controlplane.convlogs.models.ConversationLog.Source",
        "ConversationLogFormatEnum": "controlplane.convlogs.models.ConversationLog.Format",
        "LogAnalysisStatusEnum": "controlplane.convlogs.models.LogAnalysis.Status",
        "TuningTrialStateEnum": "controlplane.tuning.models.TuningTrial.State",
        # Replay runs and tuning studies share these states.
        "RunStatusEnum": "controlplane.tuning.models.TuningStudy.Status",
        "SeverityEnum": "controlplane.alerts.models.Severity",
        "SuggestionSeverityEnum": "controlplane.advice.rules.Severity",
    },
    "SERVE_PERMISSIONS": ["controlplane.accounts.permissions.HasRole"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Template documents above this size are refused before parsing.
TEMPLATE_MAX_BYTES = env_int("TEMPLATE_MAX_BYTES", 256 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = max(TEMPLATE_MAX_BYTES * 4, 2_621_440)
# Largest multipart body: the 20 MiB dataset or log file plus the form's other fields and the multipart framing.
# Bodies over their limit get 413 before they are read (controlplane/lib/body_limit.py).
UPLOAD_MAX_BYTES = env_int("UPLOAD_MAX_BYTES", 21 * 1024 * 1024)
if UPLOAD_MAX_BYTES < DATA_UPLOAD_MAX_MEMORY_SIZE:
    raise EnvError(f"UPLOAD_MAX_BYTES: must be at least {DATA_UPLOAD_MAX_MEMORY_SIZE} (DATA_UPLOAD_MAX_MEMORY_SIZE)")
# Conversation logs (docs/conversation-logs.md): stored as files here; one upload may be this large (its endpoint
# alone gets this limit instead of UPLOAD_MAX_BYTES); a gzip log may decompress to at most this much; an admin or
# SRE may register a file already on this host only from under the import directory (unset: importing is off).
CONVERSATION_LOG_DIR = Path(env_str("CONVERSATION_LOG_DIR", str(VAR_DIR / "conversation-logs")))
CONVERSATION_LOG_MAX_BYTES = env_int("CONVERSATION_LOG_MAX_BYTES", 512 * 1024 * 1024)
CONVERSATION_LOG_MAX_DECOMPRESSED_BYTES = env_int("CONVERSATION_LOG_MAX_DECOMPRESSED_BYTES", 4 * 1024 * 1024 * 1024)
CONVERSATION_LOG_IMPORT_DIR = env_str("CONVERSATION_LOG_IMPORT_DIR")
# Request paths whose multipart body may be as large as a conversation log (plus the form's framing).
LARGE_UPLOAD_PATHS = ("/api/v1/conversation-logs/", "/conversation-logs/upload/")
FILE_UPLOAD_HANDLERS = [
    "controlplane.lib.body_limit.BoundedUploadHandler",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # Celery logs a line per task run ("Task ... succeeded in"), per task received by a worker and per task sent
    # by beat: periodic ones several a second. Failures are warnings and errors, so they still show; LOG_LEVEL=DEBUG
    # brings the per-run lines back.
    "loggers": {
        name: {"level": "DEBUG" if LOG_LEVEL == "DEBUG" else "WARNING"}
        for name in ("celery.app.trace", "celery.worker.strategy", "celery.beat")
    },
}

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
