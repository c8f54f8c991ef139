"""Shapes of tuning studies and their trials in the API."""

from rest_framework import serializers

from controlplane.lib.serializers import StrictSerializer
from controlplane.tuning.models import TuningStudy, TuningTrial


class StudyCreateSerializer(StrictSerializer):
    pool = serializers.CharField(max_length=64)
    template = serializers.CharField(max_length=64)
    base_version = serializers.IntegerField(min_value=1, help_text="The template version the candidates start from.")
    log = serializers.CharField(max_length=64, help_text="The conversation log every trial replays.")
    space = serializers.JSONField(
        help_text='Fields and ranges: [{"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 64, '
        '"step": 8}, {"path": "...", "type": "float", "low", "high", "step"?, "log"?}, '
        '{"path": "...", "type": "choice", "choices": [...]}]'
    )
    objective = serializers.CharField(max_length=16, help_text="min_p99, max_throughput or max_qps")
    replay = serializers.JSONField(
        help_text='{"qps": 50, "duration_s": 30, "repeats": 1, "arrival": "poisson", "selection": "all"}; max_qps: '
        '"qps_ladder". repeats (1-10): replays per trial (and per ladder step), scored by their median; '
        'repeats_p99: "median" (the median of the repeats\' P99s, default) or "pooled" (the P99 of their requests '
        "together)"
    )
    constraints = serializers.JSONField(
        required=False, default=None, help_text='{"p99_max_s": 1.8, "error_rate_max": 0.005} (the SLO by default)'
    )
    budget = serializers.IntegerField(help_text="Trials at most (a grid also ends when every point was tried).")
    sampler = serializers.CharField(max_length=8, required=False, default="tpe", help_text="tpe, grid or random")
    seed = serializers.IntegerField(required=False, default=0)
    label = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    reason = serializers.CharField(max_length=2000)


class StudyCancelSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=2000)


class CandidateVersionSerializer(serializers.Serializer):
    template = serializers.CharField()
    number = serializers.IntegerField()
    id = serializers.IntegerField()


def _ref(version) -> dict | None:
    if version is None:
        return None
    return {"template": version.template.name, "number": version.number, "id": version.pk}


class TrialSerializer(serializers.ModelSerializer):
    version = serializers.SerializerMethodField()
    replay_run = serializers.IntegerField(source="replay_run_id", allow_null=True)

    class Meta:
        model = TuningTrial
        fields = [
            "number",
            "state",
            "params",
            "version",
            "replay_run",
            "steps",
            "value",
            "measured",
            "is_feasible",
            "violations",
            "error",
            "started_at",
            "finished_at",
        ]

    def get_version(self, trial) -> CandidateVersionSerializer(allow_null=True):
        return _ref(trial.version)


class StudySerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    log = serializers.CharField(source="log.name")
    base_version = serializers.SerializerMethodField()
    pool_version_before = serializers.SerializerMethodField()
    best_trial = serializers.IntegerField(source="best_trial.number", allow_null=True, default=None)
    best_value = serializers.FloatField(source="best_trial.value", allow_null=True, default=None)
    best_version = serializers.SerializerMethodField(help_text="The best candidate, a saved and unpublished version.")
    cold_fields = serializers.ListField(child=serializers.CharField())
    created_by = serializers.CharField(source="created_by.username")
    cancelled_by = serializers.CharField(source="cancelled_by.username", allow_null=True, default=None)
    replay = serializers.JSONField(source="replay_spec")

    class Meta:
        model = TuningStudy
        fields = [
            "id",
            "label",
            "pool",
            "base_version",
            "pool_version_before",
            "space",
            "cold_fields",
            "objective",
            "constraints",
            "sampler",
            "seed",
            "budget",
            "replay",
            "log",
            "status",
            "trials_done",
            "best_trial",
            "best_value",
            "best_version",
            "error",
            "reason",
            "created_by",
            "cancelled_by",
            "created_at",
            "started_at",
            "progress_at",
            "finished_at",
        ]

    def get_base_version(self, study) -> CandidateVersionSerializer:
        return _ref(study.base_version)

    def get_pool_version_before(self, study) -> CandidateVersionSerializer(allow_null=True):
        return _ref(study.pool_version_before)

    def get_best_version(self, study) -> CandidateVersionSerializer(allow_null=True):
        return _ref(study.best_trial.version) if study.best_trial_id else None


class StudyDetailSerializer(StudySerializer):
    trials = TrialSerializer(many=True, read_only=True)

    class Meta(StudySerializer.Meta):
        fields = [*StudySerializer.Meta.fields, "trials"]
