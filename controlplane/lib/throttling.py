"""Throttling with maintained libraries: DRF's throttles for the REST API, `limits` for agents' token attempts.

Failed logins (dashboard form, admin, token endpoint) are django-axes' (settings.AXES_*). The rates are read from
settings when a request is checked, not when the class is defined, so a deployment's environment and a test's
settings override both apply.
"""

import functools

from django.conf import settings
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter
from rest_framework import throttling


class AnonRateThrottle(throttling.AnonRateThrottle):
    """Anonymous requests to views open to them, per client address (`API_THROTTLE_ANON`)."""

    def get_rate(self) -> str:
        return settings.API_THROTTLE_ANON


class UserRateThrottle(throttling.UserRateThrottle):
    """Signed-in requests, per user (`API_THROTTLE_USER`)."""

    def get_rate(self) -> str:
        return settings.API_THROTTLE_USER


@functools.cache
def _limiter(storage_uri: str) -> MovingWindowRateLimiter:
    return MovingWindowRateLimiter(storage_from_string(storage_uri))


def _agent_auth() -> tuple[MovingWindowRateLimiter, object]:
    # Redis when the control plane has it (every ASGI process counts the same attempts), else this process's memory.
    return _limiter(settings.REDIS_URL or "memory://"), parse(settings.AGENT_AUTH_FAILURE_RATE)


def agent_auth_blocked(address: str) -> bool:
    """Whether this client address used up its failed node-token attempts for the current window."""
    limiter, rate = _agent_auth()
    return not limiter.test(rate, "agent-auth", address)


def agent_auth_failed(address: str) -> None:
    """Count one failed node-token attempt from this address."""
    limiter, rate = _agent_auth()
    limiter.hit(rate, "agent-auth", address)
