"""One row per mutation, never updated or deleted through the application."""

from django.conf import settings
from django.db import models

from controlplane.lib.errors import DomainError


class AuditImmutable(DomainError):
    status_code = 405
    code = "audit_immutable"


class AuditQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AuditImmutable("audit entries cannot be changed")

    def delete(self):
        raise AuditImmutable("audit entries cannot be deleted")


class AuditEntry(models.Model):
    """A recorded mutation; `actor_name` keeps the name as it was when the change was made."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    actor_name = models.CharField(max_length=150)
    request_id = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64)
    target_repr = models.CharField(max_length=200)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.target_repr}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise AuditImmutable("audit entries cannot be changed")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AuditImmutable("audit entries cannot be deleted")
