"""Shapes of impact records in the API."""

from django.urls import reverse
from rest_framework import serializers

from controlplane.impact.models import ImpactRecord
from controlplane.params.serializers import FieldChangeSerializer


class ImpactRecordSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool_name")
    template = serializers.CharField(source="template.name", allow_null=True, default=None)
    version_before = serializers.CharField(source="version_before.ref", allow_null=True, default=None)
    version_after = serializers.CharField(source="version_after.ref", allow_null=True, default=None)
    actor = serializers.CharField(source="actor_name")
    changes = FieldChangeSerializer(source="field_changes", many=True)
    source = serializers.JSONField()
    before = serializers.JSONField(help_text="Per figure {median, mean, p90, samples} of the window before.")
    after = serializers.JSONField(help_text="Per figure {median, mean, p90, samples} of the window after.")
    load = serializers.JSONField(
        help_text="Load similarity: qps_before, qps_after (medians), qps_ratio, tolerance, samples and nodes."
    )
    conclusions = serializers.JSONField(
        help_text="Per figure {verdict: improved|worsened|changed|no_change|unknown, change, relative_change, "
        "p_value, better}."
    )
    replay_comparison = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = ImpactRecord
        fields = [
            "id",
            "kind",
            "pool",
            "template",
            "version_before",
            "version_after",
            "subject",
            "actor",
            "reason",
            "changed_at",
            "source",
            "window_before_s",
            "window_after_s",
            "status",
            "measured_at",
            "outcome",
            "outcome_reason",
            "load",
            "changes",
            "before",
            "after",
            "conclusions",
            "replay_comparison",
            "url",
        ]

    def get_replay_comparison(self, record) -> int | None:
        return record.source.get("id") if record.source.get("type") == "replay_comparison" else None

    def get_url(self, record) -> str:
        return reverse("dashboard:impact-record", kwargs={"pk": record.pk})
