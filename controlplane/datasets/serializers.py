"""API shapes of intent datasets, models and releases, and of warmup datasets, versions and pool assignments."""

from rest_framework import serializers

from controlplane.datasets.conversation_logs import MAX_TOP_N
from controlplane.datasets.models import (
    IntentDataset,
    IntentModel,
    IntentModelRelease,
    PoolWarmup,
    WarmupDataset,
    WarmupDatasetVersion,
)
from controlplane.datasets.services.training import MAX_EPOCHS
from controlplane.datasets.uploads import FORMATS
from controlplane.lib.serializers import SlugNameField, StrictSerializer
from engine_node.policy.train_intent import EPOCHS


class IntentDatasetSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username")

    class Meta:
        model = IntentDataset
        fields = [
            "name",
            "description",
            "source_format",
            "row_count",
            "duplicates_removed",
            "label_counts",
            "has_templates",
            "sha256",
            "created_by",
            "created_at",
        ]


class PreviewRowSerializer(serializers.Serializer):
    text = serializers.CharField()
    label = serializers.CharField()
    lang = serializers.CharField()
    template = serializers.CharField()


class IntentDatasetDetailSerializer(IntentDatasetSerializer):
    preview = PreviewRowSerializer(many=True, read_only=True)

    class Meta(IntentDatasetSerializer.Meta):
        fields = [*IntentDatasetSerializer.Meta.fields, "preview"]


class UploadSerializer(StrictSerializer):
    """A multipart `file` (format from its extension unless given) or a JSON `content` string with its `format`."""

    format = serializers.ChoiceField(choices=FORMATS, required=False)
    content = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    file = serializers.FileField(required=False)

    def validate(self, attrs):
        if ("content" in attrs) == ("file" in attrs):
            raise serializers.ValidationError({"content": ["give either content (with format) or a file"]})
        if "format" not in attrs:
            name = attrs["file"].name.lower() if "file" in attrs else ""
            if name.endswith(".csv"):
                attrs["format"] = "csv"
            elif name.endswith((".jsonl", ".ndjson")):
                attrs["format"] = "jsonl"
            else:
                raise serializers.ValidationError({"format": ["required: csv or jsonl"]})
        return attrs


class IntentDatasetCreateSerializer(UploadSerializer):
    name = SlugNameField()
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class IntentModelSerializer(serializers.ModelSerializer):
    dataset = serializers.CharField(source="dataset.name")
    created_by = serializers.CharField(source="created_by.username")

    class Meta:
        model = IntentModel
        fields = [
            "id",
            "dataset",
            "number",
            "epochs",
            "status",
            "progress",
            "progress_text",
            "accuracy",
            "sha256",
            "error",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]


class IntentModelDetailSerializer(IntentModelSerializer):
    class Meta(IntentModelSerializer.Meta):
        fields = [*IntentModelSerializer.Meta.fields, "evaluation"]


class IntentModelCreateSerializer(StrictSerializer):
    epochs = serializers.IntegerField(min_value=1, max_value=MAX_EPOCHS, default=EPOCHS)


class IntentModelRefSerializer(serializers.ModelSerializer):
    dataset = serializers.CharField(source="dataset.name")

    class Meta:
        model = IntentModel
        fields = ["id", "dataset", "number", "accuracy", "sha256"]


class IntentModelReleaseSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    intent_model = IntentModelRefSerializer(allow_null=True)
    published_by = serializers.CharField(source="published_by.username")

    class Meta:
        model = IntentModelRelease
        fields = ["id", "pool", "intent_model", "published_by", "published_at", "reason", "is_active"]


class IntentModelReleaseCreateSerializer(StrictSerializer):
    """Publish `dataset`'s model `number` to `pool`; without them, the pool returns to the built-in model."""

    pool = serializers.CharField()
    dataset = serializers.CharField(required=False)
    number = serializers.IntegerField(min_value=1, required=False)
    reason = serializers.CharField(max_length=2000)

    def validate(self, attrs):
        if ("dataset" in attrs) != ("number" in attrs):
            raise serializers.ValidationError({"number": ["give dataset and number together, or neither"]})
        return attrs


class WarmupVersionSerializer(serializers.ModelSerializer):
    dataset = serializers.CharField(source="dataset.name")
    author = serializers.CharField(source="author.username")

    class Meta:
        model = WarmupDatasetVersion
        fields = [
            "dataset",
            "number",
            "base_number",
            "author",
            "created_at",
            "comment",
            "source",
            "source_format",
            "message_count",
            "duplicates_removed",
            "intent_counts",
            "derived_from",
            "sha256",
        ]


class WarmupMessageSerializer(serializers.Serializer):
    text = serializers.CharField()
    intent = serializers.CharField(allow_null=True)
    business_tag = serializers.CharField(allow_null=True)
    count = serializers.IntegerField(allow_null=True)


class WarmupVersionDetailSerializer(WarmupVersionSerializer):
    """A version with its first 50 messages."""

    preview = WarmupMessageSerializer(many=True, read_only=True)

    class Meta(WarmupVersionSerializer.Meta):
        fields = [*WarmupVersionSerializer.Meta.fields, "preview"]


class WarmupDatasetSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username")

    class Meta:
        model = WarmupDataset
        fields = ["name", "description", "latest_number", "created_by", "created_at"]


class PoolWarmupSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    dataset = serializers.CharField(source="version.dataset.name")
    number = serializers.IntegerField(source="version.number")
    sha256 = serializers.CharField(source="version.sha256")
    message_count = serializers.IntegerField(source="version.message_count")
    assigned_by = serializers.CharField(source="assigned_by.username")

    class Meta:
        model = PoolWarmup
        fields = [
            "id",
            "pool",
            "dataset",
            "number",
            "sha256",
            "message_count",
            "assigned_by",
            "assigned_at",
            "reason",
            "is_active",
        ]


class WarmupDatasetDetailSerializer(WarmupDatasetSerializer):
    """A dataset with its versions (newest first) and the pools that replay one of them now."""

    versions = WarmupVersionSerializer(many=True, read_only=True, source="version_list")
    assignments = PoolWarmupSerializer(many=True, read_only=True, source="active_assignments")

    class Meta(WarmupDatasetSerializer.Meta):
        fields = [*WarmupDatasetSerializer.Meta.fields, "versions", "assignments"]


class WarmupUploadSerializer(UploadSerializer):
    """Messages to keep as they are (`source` upload), or a conversation log to reduce to its `top_n` queries."""

    source = serializers.ChoiceField(
        choices=WarmupDatasetVersion.Source.choices, default=WarmupDatasetVersion.Source.UPLOAD
    )
    top_n = serializers.IntegerField(min_value=1, max_value=MAX_TOP_N, required=False)
    comment = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")

    def validate(self, attrs):
        attrs = super().validate(attrs)
        if "top_n" in attrs and attrs["source"] != WarmupDatasetVersion.Source.CONVERSATION_LOG:
            raise serializers.ValidationError({"top_n": ["only for source conversation_log"]})
        return attrs


class WarmupDatasetCreateSerializer(WarmupUploadSerializer):
    name = SlugNameField()
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class WarmupVersionCreateSerializer(WarmupUploadSerializer):
    """The next version, made from `base_version` (the latest one; otherwise 409)."""

    base_version = serializers.IntegerField(min_value=1)


class PoolWarmupCreateSerializer(StrictSerializer):
    pool = serializers.CharField()
    dataset = serializers.CharField()
    number = serializers.IntegerField(min_value=1)
    reason = serializers.CharField(max_length=2000)
