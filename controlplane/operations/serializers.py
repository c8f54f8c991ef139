"""API shapes of conversation overrides."""

from rest_framework import serializers

from controlplane.lib.serializers import StrictSerializer
from controlplane.operations.models import ConversationOverride
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
