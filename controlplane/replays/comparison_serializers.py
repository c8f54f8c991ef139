"""API shapes of run figures, the requests behind a figure, and replay comparisons."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.lib.serializers import JSONObjectField, StrictSerializer
from controlplane.replays.comparison_models import ReplayComparison
from controlplane.replays.figure_selectors import RECORD_FIELDS
from controlplane.replays.models import ReplayRequest
from controlplane.replays.noise import DEFAULT_SEED, RESAMPLES


class RunFiguresSerializer(serializers.Serializer):
    run_id = serializers.IntegerField()
    label = serializers.CharField()
    status = serializers.CharField()
    pool = serializers.CharField()
    template_version = serializers.CharField(allow_null=True)
    is_simulated = serializers.BooleanField(help_text="Sent to simulator nodes: the figures are not vLLM measurements.")
    simulated_note = serializers.CharField(allow_blank=True)
    figures = JSONObjectField(
        help_text="latency (e2e_s, ttft_s, first_round_s: count, p50/p95/p99/p999 and the seq of the request holding "
        "each), throughput, errors, reply_tokens, continuation_rounds, intents, pool_metrics, and for a ladder run "
        "ladder (each step's first-round P99 and error rate against the SLO, sustained_qps); nearest-rank percentiles."
    )
    latency_cdf = JSONObjectField(help_text="`x` (seconds) and `y` (share of successful requests at or below).")


class ReplayRequestRowSerializer(serializers.ModelSerializer):
    class Meta:
        model = ReplayRequest
        fields = list(RECORD_FIELDS)


@extend_schema_field({"type": "array", "items": {"type": "integer"}, "minItems": 2})
class RunIdListField(serializers.JSONField):
    """Replay run ids, the baseline first; the service checks each."""


class ComparisonCreateSerializer(StrictSerializer):
    runs = RunIdListField()
    label = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    force = serializers.BooleanField(
        required=False, default=False, help_text="Compare runs of different traffic (needs `reason`)."
    )
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
    seed = serializers.IntegerField(required=False, default=DEFAULT_SEED)
    resamples = serializers.IntegerField(required=False, default=RESAMPLES)


class ComparisonSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username")
    runs = serializers.SerializerMethodField()
    verdict = serializers.SerializerMethodField()
    is_simulated = serializers.SerializerMethodField()

    class Meta:
        model = ReplayComparison
        fields = ["id", "label", "runs", "created_by", "created_at", "forced_reason", "verdict", "is_simulated"]

    def get_runs(self, obj) -> list[int]:
        return [member.run_id for member in obj.members.all()]

    def get_verdict(self, obj) -> list[str]:
        return list(obj.result.get("verdict", []))

    def get_is_simulated(self, obj) -> bool:
        return bool(obj.result.get("is_simulated"))


class ComparisonDetailSerializer(ComparisonSerializer):
    result = JSONObjectField(
        help_text="method, runs (figures, latency CDF), figures (values side by side, each compared run's diff, "
        "relative diff, bootstrap interval, repeat spread, beyond_noise, direction), version_diffs, slo, verdict."
    )

    class Meta(ComparisonSerializer.Meta):
        fields = [*ComparisonSerializer.Meta.fields, "seed", "resamples", "result"]
