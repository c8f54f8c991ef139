"""Manual overrides of one conversation's temperature, set by customer service for a limited time."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.params import schema


class ConversationOverride(models.Model):
    """A person's decision that one conversation gets a tier or a temperature until it expires or is revoked.

    At the gateway it wins over regexes, the intent and business tags; only degradation wins over it.
    `pool` null means every pool.
    """

    pool = models.ForeignKey(
        "nodes.Pool", null=True, blank=True, on_delete=models.PROTECT, related_name="conversation_overrides"
    )
    conversation_id = models.CharField(max_length=128)
    # NULL, not "": "no tier" must read the same as "no temperature" in the exactly-one check and the bundle.
    tier = models.CharField(max_length=16, null=True, blank=True, choices=[(t, t) for t in schema.TIERS])  # noqa: DJ001
    temperature = models.FloatField(null=True, blank=True)
    reason = models.TextField()
    expires_at = models.DateTimeField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    revoke_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(tier__isnull=False, temperature__isnull=True)
                | Q(tier__isnull=True, temperature__isnull=False),
                name="override_tier_xor_temperature",
            ),
            models.CheckConstraint(
                condition=Q(tier__isnull=True) | Q(tier__in=schema.TIERS), name="override_tier_known"
            ),
            models.CheckConstraint(
                condition=Q(temperature__isnull=True) | Q(temperature__gte=0, temperature__lte=2),
                name="override_temperature_range",
            ),
            # At most one unrevoked override per conversation and scope. Two constraints, because NULL pools
            # are distinct in a unique index (and SQLite has no NULLS NOT DISTINCT).
            models.UniqueConstraint(
                fields=["pool", "conversation_id"],
                condition=Q(revoked_at__isnull=True, pool__isnull=False),
                name="override_one_open_per_pool_conversation",
            ),
            models.UniqueConstraint(
                fields=["conversation_id"],
                condition=Q(revoked_at__isnull=True, pool__isnull=True),
                name="override_one_open_per_conversation_all_pools",
            ),
        ]

    def __str__(self) -> str:
        scope = self.pool.name if self.pool_id else "all pools"
        return f"conversation {self.conversation_id} on {scope}"

    def is_active(self, now) -> bool:
        return self.revoked_at is None and self.expires_at > now

    @property
    def setting(self) -> str:
        """What the override sets, as people read it: `tier strict` or `temperature 0.2`."""
        return f"tier {self.tier}" if self.tier is not None else f"temperature {self.temperature:g}"

    def snapshot(self) -> dict:
        """The audit log's before/after of an override."""
        return {
            "id": self.pk,
            "pool": self.pool.name if self.pool_id else None,
            "conversation": self.conversation_id,
            "tier": self.tier,
            "temperature": self.temperature,
            "reason": self.reason,
            "expires_at": self.expires_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


class PoolDegradation(models.Model):
    """A pool's degradation state: whether its gateways run degraded, why, and the automatic path's clocks.

    One row per pool, created on first use. `load_above_since`/`load_below_since` are the hysteresis clocks of
    the automatic path: when the pool's load last crossed above the entry threshold (or below the exit one) and
    has stayed there since.
    """

    class Cause(models.TextChoices):
        MANUAL = "manual"
        AUTOMATIC = "automatic"

    pool = models.OneToOneField("nodes.Pool", on_delete=models.CASCADE, related_name="degradation")
    is_active = models.BooleanField(default=False)
    cause = models.CharField(max_length=16, choices=Cause.choices, blank=True)
    reason = models.TextField(blank=True)
    since = models.DateTimeField(null=True, blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    load = models.FloatField(null=True, blank=True)
    load_at = models.DateTimeField(null=True, blank=True)
    load_above_since = models.DateTimeField(null=True, blank=True)
    load_below_since = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"degradation of {self.pool.name}"

    def snapshot(self) -> dict:
        """The audit log's before/after of a degradation state."""
        return {
            "pool": self.pool.name,
            "active": self.is_active,
            "cause": self.cause,
            "reason": self.reason,
            "since": self.since.isoformat() if self.since else None,
        }


class DegradationEvent(models.Model):
    """One transition of a pool into or out of degradation, with its cause, reason and the load that drove it."""

    class Kind(models.TextChoices):
        ENTERED = "entered"
        LEFT = "left"

    pool = models.ForeignKey("nodes.Pool", on_delete=models.CASCADE, related_name="degradation_events")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    cause = models.CharField(max_length=16, choices=PoolDegradation.Cause.choices)
    reason = models.TextField()
    load = models.FloatField(null=True, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.pool.name} {self.kind} degradation ({self.cause})"
