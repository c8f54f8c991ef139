"""API shapes of conversation logs, their analyses and applying an analysis' suggestions."""

from rest_framework import serializers

from controlplane.convlogs.models import ConversationLog, LogAnalysis
from controlplane.convlogs.suggestions import APPLICABLE_KINDS
from controlplane.lib.serializers import JSONObjectField, NameListField, SlugNameField, StrictSerializer


class ConversationLogSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username")

    class Meta:
        model = ConversationLog
        fields = [
            "name",
            "description",
            "original_filename",
            "source",
            "format",
            "compression",
            "size_bytes",
            "sha256",
            "created_by",
            "created_at",
            "conversation_count",
            "message_count",
            "bad_line_count",
        ]


class ConversationLogUploadSerializer(StrictSerializer):
    """A multipart upload: the log `file` (JSON Lines or CSV, optionally gzip-compressed; the format is read from its
    first bytes) with its `name` and `description`."""

    name = SlugNameField()
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    file = serializers.FileField()


class ConversationLogImportSerializer(StrictSerializer):
    """Register a file already on the control-plane host: `path` relative to (or inside) CONVERSATION_LOG_IMPORT_DIR."""

    name = SlugNameField()
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    path = serializers.CharField(max_length=1024, trim_whitespace=False)


class LogAnalysisSerializer(serializers.ModelSerializer):
    log = serializers.CharField(source="log.name")
    pool = serializers.CharField(source="pool.name")
    version = serializers.CharField(source="version.ref")
    created_by = serializers.CharField(source="created_by.username")

    class Meta:
        model = LogAnalysis
        fields = [
            "id",
            "log",
            "pool",
            "version",
            "intent_model",
            "coverage",
            "status",
            "progress",
            "progress_text",
            "token_source",
            "error",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
        ]


class LogAnalysisDetailSerializer(LogAnalysisSerializer):
    params = JSONObjectField(read_only=True)
    result = JSONObjectField(read_only=True, allow_null=True)
    suggestions = serializers.ListField(child=JSONObjectField(), read_only=True, allow_null=True)

    class Meta(LogAnalysisSerializer.Meta):
        fields = [*LogAnalysisSerializer.Meta.fields, "params", "result", "suggestions"]


class ConversationLogDetailSerializer(ConversationLogSerializer):
    analyses = LogAnalysisSerializer(many=True, read_only=True, source="analysis_list")

    class Meta(ConversationLogSerializer.Meta):
        fields = [*ConversationLogSerializer.Meta.fields, "analyses"]


class LogAnalysisCreateSerializer(StrictSerializer):
    pool = serializers.CharField(max_length=64)
    coverage = serializers.IntegerField(
        required=False, default=90, help_text="Share (%) of first-turn replies the cap covers."
    )


class SuggestionApplySerializer(StrictSerializer):
    suggestions = NameListField(
        required=False,
        help_text=f"Kinds to apply, some of {', '.join(APPLICABLE_KINDS)}; default: all applicable.",
    )
    base_version = serializers.IntegerField(required=False, min_value=1, help_text="Default: the template's latest.")
    comment = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class AppliedVersionSerializer(serializers.Serializer):
    template = serializers.CharField()
    number = serializers.IntegerField()
    ref = serializers.CharField()
    comment = serializers.CharField()
    is_published = serializers.BooleanField()
