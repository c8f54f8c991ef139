"""Writing audit entries, and the registry of every service that must write one."""

from collections.abc import Callable
from typing import Any

from django.db import models

from controlplane.audit.models import AuditEntry
from controlplane.lib.request_id import current_request_id

# Every service that changes state registers here; a test proves each writes exactly one entry.
MUTATING_SERVICES: dict[str, Callable[..., Any]] = {}


def mutating_service(func: Callable[..., Any]) -> Callable[..., Any]:
    MUTATING_SERVICES[f"{func.__module__}.{func.__qualname__}"] = func
    return func


def audit_record(
    *,
    actor,
    action: str,
    target: models.Model,
    before: Any = None,
    after: Any = None,
    reason: str = "",
) -> AuditEntry:
    """Append one entry; call it inside the service's transaction so both land or neither."""
    return AuditEntry.objects.create(
        actor=actor if actor is not None and actor.pk else None,
        actor_name=actor.get_username() if actor is not None else "system",
        request_id=current_request_id(),
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        target_repr=str(target)[:200],
        before=before,
        after=after,
        reason=reason,
    )
