"""API shapes of alert rules, alerts, incidents and silences."""

from rest_framework import serializers

from controlplane.alerts import selectors
from controlplane.alerts.models import Alert, AlertEvent, AlertGroup, AlertRuleVersion, Severity, Silence
from controlplane.lib.serializers import SlugNameField, StrictSerializer


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
    name = SlugNameField()


class AlertRuleVersionCreateSerializer(_RuleFields):
    """A new version edited from `base_version`; fields left out keep the base version's values."""

    base_version = serializers.IntegerField(allow_null=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in AlertRuleVersion.EDITABLE:
            self.fields[name].required = False
            self.fields[name].default = serializers.empty


class _Summary(serializers.Serializer):
    """Read-only: the same summaries the on-call page and its live events use; the fields describe them."""

    summarise = None

    def to_representation(self, instance):
        return type(self).summarise(instance)


class AlertSerializer(_Summary):
    summarise = staticmethod(selectors.alert_summary)

    id = serializers.IntegerField()
    fingerprint = serializers.CharField(help_text="of rule, scope and name; stable across firings")
    rule = serializers.CharField()
    rule_version = serializers.IntegerField()
    scope = serializers.ChoiceField(choices=AlertRuleVersion.Scope.choices)
    name = serializers.CharField(help_text="the node's, the pool's, or `fleet`")
    pool = serializers.CharField()
    node = serializers.CharField()
    state = serializers.ChoiceField(choices=Alert.State.choices)
    severity = serializers.ChoiceField(choices=Severity.choices)
    value = serializers.FloatField(allow_null=True)
    value_text = serializers.CharField()
    is_stale = serializers.BooleanField()
    is_silenced = serializers.BooleanField()
    started_at = serializers.DateTimeField()
    fired_at = serializers.DateTimeField(allow_null=True)
    resolved_at = serializers.DateTimeField(allow_null=True)
    for_s = serializers.IntegerField()
    condition = serializers.CharField()
    summary = serializers.CharField()
    runbook = serializers.CharField()
    runbook_url = serializers.CharField()
    incident = serializers.IntegerField(allow_null=True)


class NoSourceSerializer(serializers.Serializer):
    """A node rule that cannot watch a node: the node has no source for the rule's figure (neither firing nor OK)."""

    node = serializers.CharField()
    pool = serializers.CharField()
    rule = serializers.CharField()
    metric = serializers.CharField(help_text="the sample figure the rule reads, e.g. `fragmentation_ratio`")
    label = serializers.CharField()
    reason = serializers.CharField(help_text="why the node cannot measure it, in the node's words (bounded text)")


class AffectedSerializer(serializers.Serializer):
    alert = serializers.IntegerField()
    scope = serializers.ChoiceField(choices=AlertRuleVersion.Scope.choices)
    name = serializers.CharField()
    node = serializers.CharField()
    state = serializers.ChoiceField(choices=Alert.State.choices)
    severity = serializers.ChoiceField(choices=Severity.choices)
    value_text = serializers.CharField()
    is_stale = serializers.BooleanField()
    is_silenced = serializers.BooleanField()


class IncidentSerializer(_Summary):
    summarise = staticmethod(selectors.incident_summary)

    id = serializers.IntegerField()
    key = serializers.CharField(help_text="`<rule>:<pool>`; `*` for the fleet")
    rule = serializers.CharField()
    pool = serializers.CharField()
    state = serializers.ChoiceField(choices=AlertGroup.State.choices)
    severity = serializers.ChoiceField(choices=Severity.choices)
    opened_at = serializers.DateTimeField()
    resolved_at = serializers.DateTimeField(allow_null=True)
    summary = serializers.CharField()
    condition = serializers.CharField()
    runbook = serializers.CharField()
    runbook_url = serializers.CharField()
    acknowledged_by = serializers.CharField(allow_null=True)
    acknowledged_at = serializers.DateTimeField(allow_null=True)
    acknowledgement_note = serializers.CharField()
    is_silenced = serializers.BooleanField()
    affected_count = serializers.IntegerField()
    affected = AffectedSerializer(many=True, help_text=f"the first {selectors.AFFECTED_LISTED}")


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


class IncidentDetailSerializer(IncidentSerializer):
    events = AlertEventSerializer(many=True, help_text="fired, escalated, acknowledged, resolved...")
