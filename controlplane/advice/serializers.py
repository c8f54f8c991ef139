"""API shapes of suggestions and of opening one as a draft version."""

from rest_framework import serializers

from controlplane.advice.rules import Severity
from controlplane.lib.serializers import StrictSerializer


class ChangeSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="Dotted field path, e.g. `batch.max_size`.")
    from_ = serializers.JSONField(help_text="The value in the pool's running version.")
    to = serializers.JSONField(help_text="The suggested value.")
    apply = serializers.ChoiceField(choices=["hot", "cold"], help_text="hot: per request; cold: drained restart.")

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields


class EvidenceSerializer(serializers.Serializer):
    label = serializers.CharField()
    value = serializers.JSONField(help_text="The figure (shares as fractions, times in seconds).")
    unit = serializers.ChoiceField(
        choices=["share", "s", ""], help_text="share: a fraction; s: seconds; empty: a count."
    )
    display = serializers.CharField(help_text="The value as people read it: 22.0 %, 1.912 s.")
    metric = serializers.CharField(allow_null=True, help_text="The pool history series it was read from.")
    samples = serializers.IntegerField(allow_null=True, help_text="Seconds of the window that carried it.")
    link = serializers.CharField(required=False, help_text="The pool history of that series over the window (API).")


class CitedRecordSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="Impact record id.")
    kind = serializers.CharField()
    path = serializers.CharField()
    from_ = serializers.JSONField()
    to = serializers.JSONField()
    outcome = serializers.CharField()
    outcome_reason = serializers.CharField(allow_blank=True)
    changed_at = serializers.DateTimeField()
    load_ratio = serializers.FloatField(allow_null=True, help_text="QPS now over the record's before-window QPS.")
    link = serializers.CharField(help_text="The record's page.")

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields


class LinksSerializer(serializers.Serializer):
    pool = serializers.CharField()
    version = serializers.CharField(help_text="The pool's running version's page.")
    preview = serializers.CharField(help_text="The page that previews the draft version and opens it.")


class SuggestionSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="Stable within a pool: `batch-idle`, `record-batch.max_size`, ...")
    source = serializers.ChoiceField(choices=["rule", "record"])
    rule = serializers.CharField()
    severity = serializers.ChoiceField(choices=Severity.choices)
    title = serializers.CharField()
    text = serializers.CharField()
    changes = ChangeSerializer(many=True)
    is_actionable = serializers.BooleanField(help_text="False: advice only, it changes no field.")
    evidence = EvidenceSerializer(many=True)
    records = CitedRecordSerializer(many=True)
    cautions = CitedRecordSerializer(many=True, help_text="Worsened records that moved a field the same way.")
    pool = serializers.CharField()
    template = serializers.CharField()
    version = serializers.IntegerField()
    is_simulated = serializers.BooleanField(
        help_text="Some of the pool's nodes run the vLLM-protocol simulator: the figures are simulated, not vLLM's."
    )
    links = LinksSerializer()


class WindowSerializer(serializers.Serializer):
    since = serializers.DateTimeField(allow_null=True)
    until = serializers.DateTimeField()
    seconds = serializers.IntegerField()


class PoolSuggestionsSerializer(serializers.Serializer):
    pool = serializers.CharField()
    template = serializers.CharField(allow_null=True)
    version = serializers.IntegerField(allow_null=True)
    window = WindowSerializer()
    computed_at = serializers.DateTimeField()
    is_simulated = serializers.BooleanField(help_text="Some of the pool's nodes run the simulator.")
    suggestions = SuggestionSerializer(many=True)


class TemplateSuggestionsSerializer(serializers.Serializer):
    template = serializers.CharField()
    latest_version = serializers.IntegerField(allow_null=True)
    suggestions = SuggestionSerializer(many=True)


# Rule names and `record-<field path>` / `worsened-<field path>`.
SUGGESTION_ID = r"^[a-z0-9][a-z0-9._-]*\Z"


class DraftFromSuggestionSerializer(StrictSerializer):
    suggestion = serializers.RegexField(
        SUGGESTION_ID,
        max_length=200,
        help_text="A suggestion id as the list shows it now.",
        error_messages={"invalid": "must be a suggestion id: lowercase letters, digits, '.', '_' and '-'"},
    )
    base_version = serializers.IntegerField(required=False, min_value=1, help_text="Default: the template's latest.")
    comment = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class TemplateDraftFromSuggestionSerializer(DraftFromSuggestionSerializer):
    pool = serializers.SlugField(max_length=64, help_text="The pool whose suggestion it is (it runs this template).")
