"""API shapes of pools and their releases."""

from rest_framework import serializers

from controlplane.lib.serializers import StrictSerializer
from controlplane.nodes import whitelist_pins
from controlplane.nodes.models import NodeCommand, Pool, PoolRelease
from controlplane.nodes.selectors import cleanup_figures
from controlplane.params.serializers import FieldChangeSerializer


class VersionRefField(serializers.Field):
    def to_representation(self, version):
        return {"template": version.template.name, "number": version.number, "hash": version.content_hash}


class PoolSerializer(serializers.ModelSerializer):
    desired_version = VersionRefField(allow_null=True)
    whitelists = serializers.SerializerMethodField()
    whitelist_changes = serializers.SerializerMethodField()

    class Meta:
        model = Pool
        fields = [
            "name",
            "description",
            "is_production",
            "desired_version",
            "whitelists",
            "whitelist_changes",
            "created_at",
        ]

    def get_whitelists(self, pool) -> dict[str, int] | None:
        """`{"legal": 3}`: the versions a production pool's latest release pinned; null where the pool follows the
        latest versions (non-production)."""
        if not pool.is_production:
            return None
        return whitelist_pins.pins_summary(whitelist_pins.release_pins(whitelist_pins.latest_release(pool)))

    def get_whitelist_changes(self, pool) -> list[dict]:
        """`[{"whitelist", "pinned", "latest"}]`: edits since the pool's release that a republish would pick up."""
        return whitelist_pins.pool_whitelist_changes(pool)


class PoolCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=64)
    is_production = serializers.BooleanField()
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ReleaseSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    version = VersionRefField()
    previous_version = VersionRefField(allow_null=True)
    actor = serializers.CharField(source="actor_name")
    whitelists = serializers.SerializerMethodField()

    class Meta:
        model = PoolRelease
        fields = [
            "id",
            "pool",
            "kind",
            "version",
            "previous_version",
            "whitelists",
            "actor",
            "reason",
            "override_reason",
            "created_at",
        ]

    def get_whitelists(self, release) -> dict[str, int]:
        """`{"legal": 3}`: the whitelist versions the release pinned."""
        return {v.whitelist.name: v.number for v in release.whitelist_versions.all()}


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


class WhitelistPinChangeSerializer(serializers.Serializer):
    """A whitelist whose pinned version changes; null where it is not pinned on that side."""

    whitelist = serializers.CharField()
    before = serializers.IntegerField(allow_null=True)
    after = serializers.IntegerField(allow_null=True)


class PreviewSerializer(serializers.Serializer):
    target = VersionRefField(allow_null=True)
    needs_restart = serializers.BooleanField()
    changes = FieldChangeSerializer(many=True)
    whitelists = WhitelistPinChangeSerializer(many=True)


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
    """Either field may be left out (it keeps its value); the service checks the stages and the window."""

    canary_stages = serializers.JSONField(required=False)
    analysis_window_s = serializers.IntegerField(required=False)
    reason = serializers.CharField(max_length=2000)


class CanarySettingsReadSerializer(serializers.Serializer):
    canary_stages = serializers.JSONField()
    analysis_window_s = serializers.IntegerField()


class NodeCommandCreateSerializer(StrictSerializer):
    op = serializers.ChoiceField(choices=NodeCommand.Op.choices)
    reason = serializers.CharField(max_length=2000)


class NodeCommandSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name")
    # "automatic" for a cleanup the node asked for itself.
    requested_by = serializers.CharField(source="requester")
    figures = serializers.SerializerMethodField(help_text="A cleanup's before/after figures, once reported.")

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
        ]

    def get_figures(self, command) -> dict | None:
        if command.op != NodeCommand.Op.CLEANUP:
            return None
        return cleanup_figures(result=command.result)
