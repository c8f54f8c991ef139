"""API shapes of conversation overrides and pool degradation."""

from rest_framework import serializers

from controlplane.lib.serializers import StrictSerializer
from controlplane.operations.models import ConversationOverride, DegradationEvent
from controlplane.operations.services import DEFAULT_EXPIRY_MINUTES


class OverrideSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name", allow_null=True, read_only=True)
    conversation = serializers.CharField(source="conversation_id", read_only=True)
    set_by = serializers.CharField(source="created_by.username", read_only=True)
    revoked_by = serializers.CharField(source="revoked_by.username", allow_null=True, read_only=True)

    class Meta:
        model = ConversationOverride
        fields = [
            "id",
            "pool",
            "conversation",
            "tier",
            "temperature",
            "reason",
            "set_by",
            "created_at",
            "expires_at",
            "revoked_at",
            "revoked_by",
            "revoke_reason",
        ]


class OverrideSetSerializer(StrictSerializer):
    """`pool` is required and null means every pool, so an override never reaches all pools by omission."""

    pool = serializers.CharField(allow_null=True)
    # The service checks the id, tier and temperature rules, so one place words each error.
    conversation = serializers.CharField(trim_whitespace=False, allow_blank=True)
    tier = serializers.CharField(required=False, allow_null=True, default=None)
    temperature = serializers.FloatField(required=False, allow_null=True, default=None)
    reason = serializers.CharField(max_length=2000)
    expires_in_minutes = serializers.IntegerField(required=False, default=DEFAULT_EXPIRY_MINUTES)


class RevokeSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=2000)


class DegradationEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", allow_null=True, read_only=True)

    class Meta:
        model = DegradationEvent
        fields = ["kind", "cause", "reason", "load", "actor", "at"]


class PoolDegradationSerializer(serializers.Serializer):
    """A pool's degradation state, its automatic path's clocks and its recent transitions."""

    pool = serializers.CharField(source="pool.name")
    active = serializers.BooleanField(source="is_active")
    cause = serializers.CharField()
    reason = serializers.CharField()
    since = serializers.DateTimeField(allow_null=True)
    changed_by = serializers.CharField(source="changed_by.username", allow_null=True, default=None)
    load = serializers.FloatField(allow_null=True)
    load_above_since = serializers.DateTimeField(allow_null=True)
    load_below_since = serializers.DateTimeField(allow_null=True)
    history = DegradationEventSerializer(many=True, source="recent_events")


class DegradationSetSerializer(StrictSerializer):
    """`active` true degrades the pool now, false ends its degradation; the reason is required either way."""

    active = serializers.BooleanField()
    reason = serializers.CharField(max_length=2000)
