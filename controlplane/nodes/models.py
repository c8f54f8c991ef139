"""A pool of engine nodes runs one desired template version; every change of it is a release."""

from django.conf import settings
from django.db import models


class Pool(models.Model):
    """A named group of engine nodes (e.g. `staging`, `prod-main`) with one desired version."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=500, blank=True)
    is_production = models.BooleanField(default=False)
    desired_version = models.ForeignKey(
        "params.TemplateVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="desired_by"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-is_production", "name"]

    def __str__(self) -> str:
        return self.name


class PoolRelease(models.Model):
    """One change of a pool's desired version: a publish or a rollback, with who, why and what before."""

    class Kind(models.TextChoices):
        PUBLISH = "publish"
        ROLLBACK = "rollback"

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="releases")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    version = models.ForeignKey("params.TemplateVersion", on_delete=models.PROTECT, related_name="releases")
    previous_version = models.ForeignKey(
        "params.TemplateVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    reason = models.TextField()
    # Set only when an SRE sent a version to production without a prior non-production release.
    override_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.pool.name}: {self.kind} {self.version}"
