"""API shapes of pools and their releases."""

from django.utils import timezone
from rest_framework import serializers

from controlplane.lib.serializers import JSONObjectField, ObjectListField, SlugNameField, StrictSerializer
from controlplane.nodes import whitelist_pins
from controlplane.nodes.models import ClientKey, EngineNode, NodeCommand, Pool, PoolRelease, Rollout, VersionRun
from controlplane.nodes.selectors import cleanup_figures, command_waiting_for
from controlplane.params.serializers import FieldChangeSerializer


class VersionRefSerializer(serializers.Serializer):
    """A template version as pools, releases and nodes name it."""

    template = serializers.CharField(source="template.name")
    number = serializers.IntegerField()
    hash = serializers.CharField(source="content_hash", help_text="sha256 of the effective parameters")


class PoolSerializer(serializers.ModelSerializer):
    desired_version = VersionRefSerializer(allow_null=True, help_text="null until a first publish")
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
            "soak_s",
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
    name = SlugNameField()
    is_production = serializers.BooleanField()
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ReleaseSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    version = VersionRefSerializer()
    previous_version = VersionRefSerializer(allow_null=True)
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
    target = VersionRefSerializer(allow_null=True, help_text="null when there is nothing to roll back to")
    needs_restart = serializers.BooleanField()
    changes = FieldChangeSerializer(many=True)
    whitelists = WhitelistPinChangeSerializer(many=True)


class NodeCreateSerializer(StrictSerializer):
    name = SlugNameField()
    pool = serializers.CharField()
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ReasonSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=2000)


class RolloutActionSerializer(StrictSerializer):
    action = serializers.ChoiceField(choices=["pause", "resume", "promote", "abort"])
    reason = serializers.CharField(max_length=2000)


class CanarySettingsSerializer(StrictSerializer):
    """Any field may be left out (it keeps its value); the service checks the stages and the windows."""

    canary_stages = ObjectListField(required=False)
    analysis_window_s = serializers.IntegerField(required=False)
    soak_s = serializers.IntegerField(
        required=False, help_text="Non-production pools: how long a node must run a version healthy (the gate)."
    )
    reason = serializers.CharField(max_length=2000)


class CanarySettingsReadSerializer(serializers.Serializer):
    canary_stages = ObjectListField()
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
    version = VersionRefSerializer()
    has_run = serializers.BooleanField(help_text="The version ran healthy on a non-production pool for its window.")
    allowed = serializers.BooleanField(help_text="A publish without override_reason would pass the gate.")
    summary = serializers.CharField(help_text="The evidence, or what is missing, in one line.")
    advice = serializers.CharField(allow_blank=True)
    retry_in_s = serializers.FloatField(allow_null=True)
    runs = VersionRunSerializer(many=True)


class NodeCommandCreateSerializer(StrictSerializer):
    op = serializers.ChoiceField(choices=[c for c in NodeCommand.Op.choices if c[0] not in NodeCommand.SYSTEM_OPS])
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


class NodeWarmupSerializer(serializers.Serializer):
    """The node's warmup: its state and, while it runs or once it ended, what the agent reported."""

    state = serializers.ChoiceField(choices=EngineNode.WarmupState.choices)
    finished_at = serializers.DateTimeField(allow_null=True)


class NodeSpeculationSerializer(serializers.Serializer):
    """The node's speculative-decoding rule as its agent last reported it (docs/speculative-decoding.md)."""

    state = serializers.CharField(help_text="on, probing, off, not configured; empty before the agent reports")
    text = serializers.CharField(help_text="The same with its figures, in words")
    rejected_windows = serializers.IntegerField(allow_null=True)
    tokens_per_s = serializers.FloatField(allow_null=True, help_text="generation speed per request, last window")
    last_change = serializers.CharField(help_text="why it was last turned off or on, with the figures")


class NodeSummarySerializer(serializers.Serializer):
    """What the fleet view shows of one node (controlplane.nodes.selectors.node_summary)."""

    name = serializers.CharField()
    pool = serializers.CharField()
    status = serializers.ChoiceField(choices=EngineNode.Status.choices)
    backend = serializers.CharField(help_text="`vllm` or `simulated`, as the agent reported; empty before")
    engine_version = serializers.CharField()
    hostname = serializers.CharField()
    gateway_url = serializers.CharField(
        help_text="Where clients reach the node's OpenAI gateway (add /v1), as the agent reported; empty before"
    )
    served_model_name = serializers.CharField(help_text="The `model` clients send to this node; empty before")
    applied = VersionRefSerializer(allow_null=True, help_text="the version the node ACKed last")
    desired = VersionRefSerializer(allow_null=True, help_text="its pool's desired version")
    in_sync = serializers.BooleanField()
    last_nack_error = serializers.CharField()
    nacked_desired = serializers.BooleanField()
    sync_code = serializers.CharField(
        help_text="Why the node is not on its desired version (e.g. nacked, canary, warming, offline); empty in sync"
    )
    sync_reason = serializers.CharField(help_text="The same in words, for people")
    last_seen_at = serializers.DateTimeField(allow_null=True)
    log_tail = serializers.ListField(child=serializers.CharField())
    has_token = serializers.BooleanField()
    warmup = NodeWarmupSerializer()
    speculation = NodeSpeculationSerializer()


class NodeListSerializer(serializers.Serializer):
    results = NodeSummarySerializer(many=True)


class NodeCreatedSerializer(serializers.Serializer):
    node = NodeSummarySerializer()
    token = serializers.CharField(help_text="The node's token, shown this once (only its hash is kept).")


class NodeTokenSerializer(serializers.Serializer):
    node = serializers.CharField()
    token = serializers.CharField(help_text="The new token, shown this once; the old one stopped working.")


class NodeRevokedSerializer(serializers.Serializer):
    node = serializers.CharField()
    revoked = serializers.BooleanField()


class StageNodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    acked = serializers.BooleanField()
    nacked = serializers.BooleanField()


class RolloutStageSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    nodes = StageNodeSerializer(many=True)


class RolloutSummarySerializer(serializers.Serializer):
    """A canary rollout (controlplane.nodes.selectors.rollout_summary)."""

    id = serializers.IntegerField()
    pool = serializers.CharField()
    state = serializers.ChoiceField(choices=Rollout.State.choices)
    is_active = serializers.BooleanField()
    from_version = VersionRefSerializer()
    to_version = VersionRefSerializer()
    stages = ObjectListField(help_text='the stages as configured, e.g. `[{"nodes": 1}, {"percent": 100}]`')
    stage_index = serializers.IntegerField()
    stage_nodes = RolloutStageSerializer(many=True)
    baseline_nodes = serializers.ListField(child=serializers.CharField())
    analysis_window_s = serializers.IntegerField()
    stage_started_at = serializers.DateTimeField()
    stage_acked_at = serializers.DateTimeField(allow_null=True)
    window_left_s = serializers.FloatField(allow_null=True)
    latest_analysis = JSONObjectField(allow_null=True, help_text="the last canary analysis, null before one")
    outcome = serializers.CharField()
    finished_at = serializers.DateTimeField(allow_null=True)


class PoolRolloutSerializer(serializers.Serializer):
    """Which nodes of the pool run its desired version, and its latest canary rollout."""

    pool = serializers.CharField()
    state = serializers.ChoiceField(choices=["idle", "no_nodes", "in_progress", "complete", "failed"])
    total = serializers.IntegerField()
    acked = serializers.IntegerField()
    failed = serializers.IntegerField()
    nodes = NodeSummarySerializer(many=True)
    canary = RolloutSummarySerializer(allow_null=True, help_text="null if the pool never had a rollout")


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


class ClientKeyListSerializer(serializers.Serializer):
    results = ClientKeySerializer(many=True)


class ClientKeyCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=64)
    pools = serializers.ListField(child=serializers.CharField(max_length=64), allow_empty=False)
    kind = serializers.ChoiceField(choices=ClientKey.Kind.choices, default=ClientKey.Kind.CLIENT)
    business_tags = serializers.ListField(child=serializers.CharField(max_length=64), required=False, default=list)


class ClientKeyIssuedSerializer(serializers.Serializer):
    client_key = ClientKeySerializer()
    key = serializers.CharField(help_text="The key itself: shown this once, never stored.")
