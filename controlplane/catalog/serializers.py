"""API shapes of model catalog entries."""

from rest_framework import serializers

from controlplane.catalog.models import ModelEntry
from controlplane.lib.serializers import StrictSerializer


class ModelEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelEntry
        fields = [
            "name",
            "source",
            "tokenizer",
            "revision",
            "tokenizer_revision",
            "is_draft_capable",
            "trust_remote_code",
            "description",
            "created_at",
            "updated_at",
        ]


class ModelEntryCreateSerializer(StrictSerializer):
    """Values are checked by the service (model_entry_create), which names the field of any problem."""

    name = serializers.CharField(max_length=64, trim_whitespace=False)
    source = serializers.CharField(max_length=512, trim_whitespace=False)
    tokenizer = serializers.CharField(max_length=512, required=False, allow_blank=True, default="")
    revision = serializers.CharField(max_length=128, required=False, allow_blank=True, default="")
    tokenizer_revision = serializers.CharField(max_length=128, required=False, allow_blank=True, default="")
    is_draft_capable = serializers.BooleanField(required=False, default=False)
    trust_remote_code = serializers.BooleanField(required=False, default=False)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ModelEntryUpdateSerializer(StrictSerializer):
    source = serializers.CharField(max_length=512, required=False, trim_whitespace=False)
    tokenizer = serializers.CharField(max_length=512, required=False, allow_blank=True)
    revision = serializers.CharField(max_length=128, required=False, allow_blank=True)
    tokenizer_revision = serializers.CharField(max_length=128, required=False, allow_blank=True)
    is_draft_capable = serializers.BooleanField(required=False)
    trust_remote_code = serializers.BooleanField(required=False)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)
    reason = serializers.CharField(max_length=500)
