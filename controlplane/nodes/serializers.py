"""API shapes of pools and their releases."""

from django.utils import timezone
from rest_framework import serializers

from controlplane.lib.serializers import StrictSerializer
from controlplane.nodes.models import NodeCommand, Pool, PoolRelease, VersionRun
from controlplane.nodes.selectors import cleanup_figures, command_waiting_for
from controlplane.params.serializers import FieldChangeSerializer


class VersionRefField(serializers.Field):
    def to_representation(self, version):
        return {"template": version.template.name, "number": version.number, "hash": version.content_hash}


class PoolSerializer(serializers.ModelSerializer):
    desired_version = VersionRefField(allow_null=True)

    class Meta:
        model = Pool
        fields = ["name", "description", "is_production", "desired_version", "soak_s", "created_at"]


class PoolCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=64)
    is_production = serializers.BooleanField()
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ReleaseSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    version = VersionRefField()
    previous_version = VersionRefField(allow_null=True)
    actor = serializers.CharField(source="actor_name")

    class Meta:
        model = PoolRelease
        fields = [
            "id",
            "pool",
            "kind",
            "version",
            "previous_version",
            "actor",
            "reason",
            "override_reason",
            "created_at",
        ]


class PublishSerializer(StrictSerializer):
    template = serializers.CharField()
    version = serializers.IntegerField(min_value=1)
    reason = serializers.CharField(max_length=2000)
    override_reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class RollbackSerializer(StrictSerializer):
    """Without `template`/`version`, the pool returns to its previous version."""

    template = serializers.CharField(required=False)
    version = serializers.IntegerField(min_value=1, required=False)
    reason = serializers.CharField(max_length=2000)

    def validate(self, attrs):
        if ("template" in attrs) != ("version" in attrs):
            raise serializers.ValidationError({"version": ["give template and version together, or neither"]})
        return attrs


class PreviewSerializer(serializers.Serializer):
    target = VersionRefField(allow_null=True)
    needs_restart = serializers.BooleanField()
    changes = FieldChangeSerializer(many=True)


class NodeCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=64)
    pool = serializers.CharField()
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ReasonSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=2000)


class RolloutActionSerializer(StrictSerializer):
    action = serializers.ChoiceField(choices=["pause", "resume", "promote", "abort"])
    reason = serializers.CharField(max_length=2000)


class CanarySettingsSerializer(StrictSerializer):
    """Any field may be left out (it keeps its value); the service checks the stages and the windows."""

    canary_stages = serializers.JSONField(required=False)
    analysis_window_s = serializers.IntegerField(required=False)
    soak_s = serializers.IntegerField(
        required=False, help_text="Non-production pools: how long a node must run a version healthy (the gate)."
    )
    reason = serializers.CharField(max_length=2000)


class CanarySettingsReadSerializer(serializers.Serializer):
    canary_stages = serializers.JSONField()
    analysis_window_s = serializers.IntegerField()
    soak_s = serializers.IntegerField()


class VersionRunSerializer(serializers.ModelSerializer):
    """One node of a non-production pool running a version: the production gate's evidence."""

    pool = serializers.CharField(source="pool.name")
    node = serializers.CharField(source="node_name")
    passes_at = serializers.DateTimeField()

    class Meta:
        model = VersionRun
        fields = [
            "pool",
            "node",
            "state",
            "started_at",
            "window_s",
            "healthy_until",
            "passes_at",
            "passed_at",
            "ended_at",
            "reason",
        ]


class GateSerializer(serializers.Serializer):
    """Would the production gate let this version into this pool, and why (or what is missing)."""

    pool = serializers.CharField()
    is_production = serializers.BooleanField()
    version = VersionRefField()
    has_run = serializers.BooleanField(help_text="The version ran healthy on a non-production pool for its window.")
    allowed = serializers.BooleanField(help_text="A publish without override_reason would pass the gate.")
    summary = serializers.CharField(help_text="The evidence, or what is missing, in one line.")
    advice = serializers.CharField(allow_blank=True)
    retry_in_s = serializers.FloatField(allow_null=True)
    runs = VersionRunSerializer(many=True)


class NodeCommandCreateSerializer(StrictSerializer):
    op = serializers.ChoiceField(choices=NodeCommand.Op.choices)
    reason = serializers.CharField(max_length=2000)


class NodeCommandSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name")
    # "automatic" for a cleanup the node asked for itself.
    requested_by = serializers.CharField(source="requester")
    figures = serializers.SerializerMethodField(help_text="A cleanup's before/after figures, once reported.")
    waiting_for = serializers.SerializerMethodField(
        help_text="What a pending command waits for (the pool's cleanup lease, the node to reconnect or start it); "
        "empty once it runs or ended."
    )

    class Meta:
        model = NodeCommand
        fields = [
            "id",
            "node",
            "op",
            "state",
            "progress",
            "result",
            "requested_by",
            "reason",
            "requested_at",
            "sent_at",
            "finished_at",
            "figures",
            "waiting_for",
        ]

    def get_figures(self, command) -> dict | None:
        if command.op != NodeCommand.Op.CLEANUP:
            return None
        return cleanup_figures(result=command.result)

    def get_waiting_for(self, command) -> str:
        return command_waiting_for(command=command, now=timezone.now())
