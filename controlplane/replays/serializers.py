"""Shapes of replay runs and their request rows in the API."""

from rest_framework import serializers

from controlplane.lib.serializers import NameListField, StrictSerializer
from controlplane.replays.models import ReplayRequest, ReplayRun
from controlplane.replays.sustained import MAX_LADDER_STEPS

REQUEST_FIELDS = [
    "seq",
    "conversation_id",
    "turn",
    "intent",
    "intent_confidence",
    "tier",
    "tier_rule",
    "node_name",
    "scheduled_at",
    "sent_at",
    "status_code",
    "ok",
    "error",
    "e2e_s",
    "ttft_s",
    "first_round_s",
    "reply_tokens",
    "prompt_tokens",
    "continuation_rounds",
    "max_tokens",
]


class ReplayRunCreateSerializer(StrictSerializer):
    pool = serializers.CharField(max_length=64)
    log = serializers.CharField(max_length=64)
    reason = serializers.CharField(max_length=2000)
    label = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    nodes = NameListField(required=False, default=list)
    selection = serializers.CharField(max_length=8, required=False, default="all")
    sample_size = serializers.IntegerField(required=False, allow_null=True, default=None)
    sample_seed = serializers.IntegerField(required=False, allow_null=True, default=None)
    top_n = serializers.IntegerField(required=False, allow_null=True, default=None)
    pacing = serializers.CharField(max_length=16, required=False, default="qps")
    qps = serializers.FloatField(required=False, allow_null=True, default=None)
    qps_steps = serializers.ListField(
        child=serializers.FloatField(),
        max_length=MAX_LADDER_STEPS,
        required=False,
        allow_null=True,
        default=None,
        help_text="pacing ladder: the QPS of each step, lowest first (2 to 8 steps)",
    )
    step_s = serializers.IntegerField(
        required=False, allow_null=True, default=None, help_text="pacing ladder: seconds each step lasts"
    )
    slo_p99_s = serializers.FloatField(
        required=False,
        allow_null=True,
        default=None,
        help_text="pacing ladder: the first-round P99 line each step is judged against, seconds (default 1.8, the "
        "report's SLO)",
    )
    arrival = serializers.CharField(max_length=8, required=False, default="poisson")
    time_scale = serializers.FloatField(required=False, allow_null=True, default=None)
    turn_gap_s = serializers.FloatField(required=False, default=5.0)
    duration_cap_s = serializers.IntegerField(required=False, default=300)
    stream = serializers.BooleanField(required=False, default=True)
    seed = serializers.IntegerField(required=False, default=0)
    production_override_reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class ReplayRunSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    log = serializers.CharField(source="log_name")
    log_id = serializers.IntegerField(allow_null=True)
    template_version = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.username")
    production_override_by = serializers.CharField(source="production_override_by.username", allow_null=True)
    cancelled_by = serializers.CharField(source="cancelled_by.username", allow_null=True)
    cpu_per_request_ms = serializers.FloatField(allow_null=True)
    nodes = serializers.ListField(child=serializers.CharField())
    targets = serializers.SerializerMethodField()

    class Meta:
        model = ReplayRun
        fields = [
            "id",
            "label",
            "pool",
            "nodes",
            "targets",
            "log",
            "log_id",
            "template_version",
            "template_hash",
            "selection",
            "sample_size",
            "sample_seed",
            "top_n",
            "pacing",
            "qps",
            "qps_steps",
            "step_s",
            "slo_p99_s",
            "arrival",
            "time_scale",
            "turn_gap_s",
            "duration_cap_s",
            "stream",
            "seed",
            "status",
            "shares",
            "planned",
            "sent",
            "done",
            "errors",
            "asked_qps",
            "achieved_qps",
            "p99_s",
            "send_lag_p99_s",
            "generator_cpu_s",
            "cpu_per_request_ms",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "reason",
            "production_override_by",
            "production_override_reason",
            "cancelled_by",
            "error",
            "pool_metrics",
        ]

    def get_template_version(self, run) -> str | None:
        version = run.template_version
        return f"{version.template.name} v{version.number}" if version is not None else None

    def get_targets(self, run) -> list[str]:
        """Names of the nodes the run sent to (resolved when it started)."""
        return [target["name"] for target in run.targets]


class ReplayRequestSerializer(serializers.ModelSerializer):
    class Meta:
        model = ReplayRequest
        fields = REQUEST_FIELDS


class ReplayCancelSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=2000)
