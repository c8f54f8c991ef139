"""API shapes of alert rules, alerts, incidents and silences."""

from rest_framework import serializers

from controlplane.alerts import selectors
from controlplane.alerts.models import AlertEvent, AlertRuleVersion, Silence
from controlplane.lib.serializers import StrictSerializer


class AlertRuleVersionSerializer(serializers.ModelSerializer):
    rule = serializers.CharField(source="rule.name", read_only=True)
    author = serializers.SerializerMethodField()
    condition = serializers.CharField(source="condition_text", read_only=True)

    class Meta:
        model = AlertRuleVersion
        fields = [
            "rule", "number", "base_number", "author", "created_at", "comment", *AlertRuleVersion.EDITABLE, "condition",
        ]  # fmt: skip

    def get_author(self, version) -> str:
        return version.author.get_username() if version.author else "system"


class _RuleFields(StrictSerializer):
    """The service checks metric, scope, thresholds and runbook, so one place words each rule error."""

    metric = serializers.CharField()
    scope = serializers.CharField()
    comparison = serializers.CharField()
    warn = serializers.FloatField()
    critical = serializers.FloatField(required=False, allow_null=True, default=None)
    for_s = serializers.IntegerField()
    runbook = serializers.CharField()
    summary = serializers.CharField(max_length=300)
    is_enabled = serializers.BooleanField(required=False, default=True)
    comment = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class AlertRuleCreateSerializer(_RuleFields):
    name = serializers.CharField()


class AlertRuleVersionCreateSerializer(_RuleFields):
    """A new version edited from `base_version`; fields left out keep the base version's values."""

    base_version = serializers.IntegerField(allow_null=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in AlertRuleVersion.EDITABLE:
            self.fields[name].required = False
            self.fields[name].default = serializers.empty


class _Summary(serializers.Serializer):
    """Read-only: the same summaries the on-call page and its live events use."""

    summarise = None

    def to_representation(self, instance):
        return type(self).summarise(instance)


class AlertSerializer(_Summary):
    summarise = staticmethod(selectors.alert_summary)


class IncidentSerializer(_Summary):
    summarise = staticmethod(selectors.incident_summary)


class AlertEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", allow_null=True, read_only=True)
    alert = serializers.CharField(source="alert.name", allow_null=True, read_only=True)

    class Meta:
        model = AlertEvent
        fields = ["kind", "alert", "severity", "value", "at", "actor", "note"]


class AcknowledgeSerializer(StrictSerializer):
    note = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class SilenceSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True)
    expired_by = serializers.CharField(source="expired_by.username", allow_null=True, read_only=True)

    class Meta:
        model = Silence
        fields = [
            "id", "rule", "pool", "node", "reason", "starts_at", "ends_at", "created_by", "created_at", "expired_at",
            "expired_by",
        ]  # fmt: skip


class SilenceCreateSerializer(StrictSerializer):
    rule = serializers.CharField(required=False, allow_blank=True, default="")
    pool = serializers.CharField(required=False, allow_blank=True, default="")
    node = serializers.CharField(required=False, allow_blank=True, default="")
    duration_minutes = serializers.IntegerField()
    reason = serializers.CharField(max_length=2000)


class SilenceExpireSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=2000)
