"""API shapes of intent datasets, models and releases."""

from rest_framework import serializers

from controlplane.datasets.models import IntentDataset, IntentModel, IntentModelRelease
from controlplane.datasets.services.training import MAX_EPOCHS
from controlplane.datasets.uploads import FORMATS
from controlplane.lib.serializers import StrictSerializer
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


class IntentDatasetCreateSerializer(StrictSerializer):
    """A multipart `file` (format from its extension unless given) or a JSON `content` string with its `format`."""

    name = serializers.CharField(max_length=64)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
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
