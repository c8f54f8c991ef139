"""API shapes of templates, versions and whitelists."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.lib.serializers import JSONObjectField, NameListField, SlugNameField, StrictSerializer
from controlplane.params import codec, schema
from controlplane.params.models import ParameterTemplate, TemplateVersion, Whitelist, WhitelistVersion


class FieldSpecSerializer(serializers.Serializer):
    path = serializers.CharField()
    kind = serializers.CharField()
    apply = serializers.CharField()
    default = serializers.JSONField()
    help = serializers.CharField()
    minimum = serializers.FloatField(allow_null=True)
    maximum = serializers.FloatField(allow_null=True)
    choices = serializers.ListField(child=serializers.CharField())
    nullable = serializers.BooleanField()


class TemplateSerializer(serializers.ModelSerializer):
    class Meta:
        model = ParameterTemplate
        fields = ["name", "description", "latest_number", "created_at"]


class TemplateCreateSerializer(StrictSerializer):
    name = SlugNameField()
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class VersionSerializer(serializers.ModelSerializer):
    template = serializers.CharField(source="template.name")
    author = serializers.CharField(source="author.username")
    base_version = serializers.IntegerField(source="base_number", allow_null=True, help_text="null for version 1")
    document = JSONObjectField(help_text="The document as authored: `{inference_params: {...}}`.")
    hash = serializers.CharField(source="content_hash")

    class Meta:
        model = TemplateVersion
        fields = ["template", "number", "base_version", "author", "created_at", "comment", "hash", "document"]


class FieldValueSerializer(serializers.Serializer):
    path = serializers.CharField()
    value = serializers.JSONField()
    apply = serializers.CharField(help_text="`hot` (applied live) or `cold` (drained restart)")
    is_default = serializers.BooleanField(help_text="true when the version leaves the field out")


class VersionDetailSerializer(VersionSerializer):
    fields_table = serializers.SerializerMethodField()

    class Meta(VersionSerializer.Meta):
        fields = [*VersionSerializer.Meta.fields, "fields_table"]

    @extend_schema_field(FieldValueSerializer(many=True))
    def get_fields_table(self, version) -> list[dict]:
        authored = schema.flatten(version.params)
        values = schema.flatten(version.effective_params)
        return [
            {"path": f.path, "value": values[f.path], "apply": f.apply, "is_default": f.path not in authored}
            for f in schema.FIELDS
        ]


class VersionCreateSerializer(StrictSerializer):
    """A new version: either `document` as JSON, or `text` in `format` (yaml or json)."""

    base_version = serializers.IntegerField(min_value=0, allow_null=True)
    document = JSONObjectField(required=False)
    text = serializers.CharField(required=False, trim_whitespace=False, allow_blank=False)
    format = serializers.ChoiceField(choices=codec.FORMATS, required=False, default="yaml")
    comment = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")

    def validate(self, attrs):
        if ("document" in attrs) == ("text" in attrs):
            raise serializers.ValidationError({"document": ["give exactly one of document or text"]})
        return attrs


class ValidateSerializer(StrictSerializer):
    document = JSONObjectField(required=False)
    text = serializers.CharField(required=False, trim_whitespace=False, allow_blank=True)
    format = serializers.ChoiceField(choices=codec.FORMATS, required=False, default="yaml")

    def validate(self, attrs):
        if ("document" in attrs) == ("text" in attrs):
            raise serializers.ValidationError({"document": ["give exactly one of document or text"]})
        return attrs


class DocumentErrorSerializer(serializers.Serializer):
    path = serializers.CharField()
    message = serializers.CharField()
    apply = serializers.CharField(allow_null=True, help_text="`hot` or `cold` for a known field, else null")


class ValidationResultSerializer(serializers.Serializer):
    valid = serializers.BooleanField()
    errors = DocumentErrorSerializer(many=True)


class ExplainSerializer(StrictSerializer):
    message = serializers.CharField(max_length=20000, trim_whitespace=False)
    business_tag = serializers.CharField(max_length=64, required=False, allow_blank=True)
    conversation_id = serializers.CharField(max_length=128, required=False, allow_blank=True)
    max_tokens = serializers.IntegerField(min_value=1, required=False, allow_null=True)
    pool = serializers.CharField(max_length=64, required=False, allow_blank=True)
    granted_tags = serializers.ListField(
        child=serializers.CharField(max_length=64),
        max_length=64,
        required=False,
        help_text="the business tags the client key is granted (an intent on a whitelist lifts max_tokens only for a "
        "key granted it); none when absent",
    )


class ExplainResultSerializer(serializers.Serializer):
    """What a gateway would decide (engine_node.policy.explain)."""

    template = serializers.CharField(help_text="`template:number`")
    pool = serializers.CharField(allow_null=True)
    decision = JSONObjectField(help_text="intent, regex hits, tier, temperature, max_tokens, queue, ...")
    decision_us = serializers.FloatField(help_text="time the policy took, in microseconds")
    intent_model = serializers.CharField(help_text="sha256 of the intent model used, empty for none")


class FieldChangeSerializer(serializers.Serializer):
    path = serializers.CharField()
    old = serializers.JSONField(allow_null=True)
    new = serializers.JSONField(allow_null=True)
    apply = serializers.CharField()


class DiffSerializer(serializers.Serializer):
    changes = FieldChangeSerializer(many=True)


class WhitelistSerializer(serializers.ModelSerializer):
    scenarios = serializers.SerializerMethodField(help_text="the scenarios of the latest version")

    class Meta:
        model = Whitelist
        fields = ["name", "description", "latest_number", "scenarios", "created_at"]

    def get_scenarios(self, whitelist) -> list[str]:
        return whitelist.versions.get(number=whitelist.latest_number).scenarios


class WhitelistCreateSerializer(StrictSerializer):
    name = SlugNameField()
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    scenarios = NameListField()
    comment = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class WhitelistVersionSerializer(serializers.ModelSerializer):
    author = serializers.CharField(source="author.username")
    base_version = serializers.IntegerField(source="base_number", allow_null=True, help_text="null for version 1")

    class Meta:
        model = WhitelistVersion
        fields = ["number", "base_version", "author", "created_at", "comment", "scenarios"]

    scenarios = serializers.ListField(child=serializers.CharField())


class WhitelistVersionCreateSerializer(StrictSerializer):
    base_version = serializers.IntegerField(min_value=1)
    scenarios = NameListField()
    comment = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
