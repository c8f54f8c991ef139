"""The Django core of the settings: secret key, apps, middleware, database, sign-in, static files, the REST API and
its limits, request bodies and uploads, logging."""

import re
from datetime import timedelta
from pathlib import Path

import dj_database_url

from controlplane.lib.env import EnvError, env_bool, env_int, env_list, env_str, weak_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent.parent
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
