"""API shapes of pools and their releases."""

from rest_framework import serializers

from controlplane.lib.serializers import StrictSerializer
from controlplane.nodes.models import ClientKey, NodeCommand, Pool, PoolRelease
from controlplane.nodes.selectors import cleanup_figures
from controlplane.params.serializers import FieldChangeSerializer


class VersionRefField(serializers.Field):
    def to_representation(self, version):
        return {"template": version.template.name, "number": version.number, "hash": version.content_hash}


class PoolSerializer(serializers.ModelSerializer):
    desired_version = VersionRefField(allow_null=True)

    class Meta:
        model = Pool
        fields = ["name", "description", "is_production", "desired_version", "created_at"]


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


class ClientKeySerializer(serializers.ModelSerializer):
    """A gateway client key as anyone may read it: its prefix, never the key or its hash."""

    pools = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    created_by = serializers.CharField(source="created_by.username")
    revoked_by = serializers.CharField(source="revoked_by.username", allow_null=True, default=None)
    is_active = serializers.BooleanField()

    class Meta:
        model = ClientKey
        fields = [
            "id",
            "name",
            "kind",
            "key_prefix",
            "pools",
            "business_tags",
            "is_active",
            "created_by",
            "created_at",
            "revoked_by",
            "revoked_at",
            "revoke_reason",
        ]


class ClientKeyCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=64)
    pools = serializers.ListField(child=serializers.CharField(max_length=64), allow_empty=False)
    kind = serializers.ChoiceField(choices=ClientKey.Kind.choices, default=ClientKey.Kind.CLIENT)
    business_tags = serializers.ListField(child=serializers.CharField(max_length=64), required=False, default=list)


class ClientKeyIssuedSerializer(serializers.Serializer):
    client_key = ClientKeySerializer()
    key = serializers.CharField(help_text="The key itself: shown this once, never stored.")
