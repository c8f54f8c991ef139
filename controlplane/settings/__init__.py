"""Django settings, read from the environment with embedded defaults (SQLite, in-memory layer, eager tasks), by
domain: core.py (Django, the API, bodies and uploads), background.py (Redis, the channel layer, Celery and its
schedule, the cache) and fleet.py (nodes, alerts, metrics, impact records, replays, rollouts, tuning). Every setting
and its environment variable is in docs/configuration.md."""

from controlplane.settings.background import *  # noqa: F403
from controlplane.settings.core import *  # noqa: F403
from controlplane.settings.fleet import *  # noqa: F403
