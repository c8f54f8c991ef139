"""REST endpoints for engine nodes: registration and credentials, operations, fleet and rollout state."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts.roles import Action
from controlplane.lib.errors import Conflict, InvalidField
from controlplane.lib.openapi import conflict, not_found
from controlplane.lib.serializers import validated
from controlplane.nodes import selectors, serializers
from controlplane.nodes.gate import version_gate
from controlplane.nodes.models import EngineNode, NodeCommand, Pool
from controlplane.nodes.services import canary_settings, cleanup, rollouts
from controlplane.nodes.services import engine_nodes as services
from controlplane.nodes.waiting import PoolContext
from controlplane.params.selectors import template_get, template_version_get

_NODES = EngineNode.objects.select_related("pool__desired_version__template", "applied_version__template")


class NodeList(APIView):
    """Every node with its status, applied and desired version (the fleet view)."""

    required_action = Action.NODE_CREDENTIALS

    @extend_schema(
        operation_id="nodes_list",
        parameters=[OpenApiParameter("pool", str, description="only the nodes of this pool")],
        responses=serializers.NodeListSerializer,
    )
    def get(self, request):
        now = timezone.now()
        nodes = _NODES.all()
        if "pool" in request.query_params:
            nodes = nodes.filter(pool__name=request.query_params["pool"])
        contexts: dict[int, PoolContext] = {}
        return Response(
            {
                "results": [
                    selectors.node_summary(node=n, now=now, context=contexts.setdefault(n.pool_id, PoolContext(n.pool)))
                    for n in nodes
                ]
            }
        )

    @extend_schema(
        request=serializers.NodeCreateSerializer,
        responses={
            201: serializers.NodeCreatedSerializer,
            404: not_found("No such pool."),
            409: conflict("A node with that name exists."),
        },
    )
    def post(self, request):
        data = validated(serializers.NodeCreateSerializer, request.data)
        pool = generics.get_object_or_404(Pool, name=data["pool"])
        node, token = services.node_create(
            actor=request.user, name=data["name"], pool=pool, description=data["description"]
        )
        return Response(
            {"node": selectors.node_summary(node=node, now=timezone.now()), "token": token},
            status=status.HTTP_201_CREATED,
        )


class NodeDetail(APIView):
    @extend_schema(responses=serializers.NodeSummarySerializer)
    def get(self, request, name):
        node = generics.get_object_or_404(_NODES, name=name)
        return Response(selectors.node_summary(node=node, now=timezone.now()))


class NodeTokenRotate(APIView):
    """Issue a new token (shown once in the response); the old one stops working at once."""

    required_action = Action.NODE_CREDENTIALS

    @extend_schema(request=serializers.ReasonSerializer, responses={201: serializers.NodeTokenSerializer})
    def post(self, request, name):
        node = generics.get_object_or_404(EngineNode, name=name)
        data = validated(serializers.ReasonSerializer, request.data)
        token = services.node_token_rotate(actor=request.user, node=node, reason=data["reason"])
        return Response({"node": node.name, "token": token}, status=status.HTTP_201_CREATED)


class NodeTokenRevoke(APIView):
    required_action = Action.NODE_CREDENTIALS

    @extend_schema(
        request=serializers.ReasonSerializer,
        responses={200: serializers.NodeRevokedSerializer, 409: conflict("The node has no active token.")},
    )
    def post(self, request, name):
        node = generics.get_object_or_404(EngineNode, name=name)
        data = validated(serializers.ReasonSerializer, request.data)
        services.node_token_revoke(actor=request.user, node=node, reason=data["reason"])
        return Response({"node": node.name, "revoked": True})


class NodeCommandList(generics.ListAPIView):
    serializer_class = serializers.NodeCommandSerializer
    required_action = Action.NODE_OPERATE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no node name
            return NodeCommand.objects.none()
        node = generics.get_object_or_404(EngineNode, name=self.kwargs["name"])
        return node.commands.select_related("node", "requested_by")

    @extend_schema(
        request=serializers.NodeCommandCreateSerializer,
        responses={
            201: serializers.NodeCommandSerializer,
            409: conflict("The node is not connected, or still carries out an earlier command."),
        },
    )
    def post(self, request, name):
        node = generics.get_object_or_404(EngineNode, name=name)
        data = validated(serializers.NodeCommandCreateSerializer, request.data)
        command = services.node_command_request(actor=request.user, node=node, op=data["op"], reason=data["reason"])
        return Response(serializers.NodeCommandSerializer(command).data, status=status.HTTP_201_CREATED)


class PoolCleanup(APIView):
    """Clean up the memory of every connected node of the pool, one node at a time."""

    required_action = Action.NODE_OPERATE

    @extend_schema(
        request=serializers.ReasonSerializer,
        responses={
            201: serializers.NodeCommandSerializer(many=True),
            409: conflict("The pool has no connected node free to clean up."),
        },
    )
    def post(self, request, name):
        pool = generics.get_object_or_404(Pool, name=name)
        data = validated(serializers.ReasonSerializer, request.data)
        commands = cleanup.pool_cleanup_request(actor=request.user, pool=pool, reason=data["reason"])
        return Response(serializers.NodeCommandSerializer(commands, many=True).data, status=status.HTTP_201_CREATED)


class PoolRollout(APIView):
    """GET: which nodes of the pool run its desired version (acked, failed, pending), and under `canary` its
    rollout through the canary stages (the active one, else the one that ended last; null if it never had one).
    POST `{action, reason}`: pause, resume, promote now (the next stage) or abort (roll back) the active rollout."""

    required_action = Action.POOL_PUBLISH

    @extend_schema(responses=serializers.PoolRolloutSerializer)
    def get(self, request, name):
        pool = generics.get_object_or_404(Pool.objects.select_related("desired_version__template"), name=name)
        now = timezone.now()
        body = selectors.pool_rollout(pool=pool, now=now)
        latest = selectors.pool_latest_rollout(pool=pool)
        body["canary"] = selectors.rollout_summary(rollout=latest, now=now) if latest else None
        return Response(body)

    @extend_schema(
        request=serializers.RolloutActionSerializer,
        responses={
            200: serializers.RolloutSummarySerializer,
            409: conflict("No rollout under way, or the action does not fit its state (paused, last stage...)."),
        },
    )
    def post(self, request, name):
        pool = generics.get_object_or_404(Pool, name=name)
        data = validated(serializers.RolloutActionSerializer, request.data)
        rollout = selectors.pool_active_rollout(pool=pool)
        if rollout is None:
            raise Conflict(f"rollout: {pool.name} has no rollout under way")
        ROLLOUT_ACTIONS[data["action"]](actor=request.user, rollout=rollout, reason=data["reason"])
        latest = selectors.pool_latest_rollout(pool=pool)
        return Response(selectors.rollout_summary(rollout=latest, now=timezone.now()))


ROLLOUT_ACTIONS = {
    "pause": rollouts.rollout_pause,
    "resume": rollouts.rollout_resume,
    "promote": rollouts.rollout_promote,
    "abort": rollouts.rollout_abort,
}


class PoolCanary(APIView):
    """GET: how the pool's publishes roll out (stages, analysis window). PATCH `{canary_stages?,
    analysis_window_s?, reason}`: change them for the next publish."""

    required_action = Action.POOL_WRITE

    @extend_schema(responses=serializers.CanarySettingsReadSerializer)
    def get(self, request, name):
        pool = generics.get_object_or_404(Pool, name=name)
        return Response(_canary_settings(pool))

    @extend_schema(request=serializers.CanarySettingsSerializer, responses=serializers.CanarySettingsReadSerializer)
    def patch(self, request, name):
        pool = generics.get_object_or_404(Pool, name=name)
        data = validated(serializers.CanarySettingsSerializer, request.data)
        pool = canary_settings.pool_canary_update(
            actor=request.user,
            pool=pool,
            canary_stages=data.get("canary_stages", pool.canary_stages),
            analysis_window_s=data.get("analysis_window_s", pool.analysis_window_s),
            soak_s=data.get("soak_s"),
            reason=data["reason"],
        )
        return Response(_canary_settings(pool))


def _canary_settings(pool: Pool) -> dict:
    return {"canary_stages": pool.canary_stages, "analysis_window_s": pool.analysis_window_s, "soak_s": pool.soak_s}


class PoolGate(APIView):
    """GET `?template=&version=`: would the production gate let this version into this pool without an override?
    The evidence (which node of which non-production pool ran it healthy, from when, for how long) or what is
    missing (NACKed with the node's error, on staging for 1 min of 5, never published to a non-production pool)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("template", str, required=True),
            OpenApiParameter("version", int, required=True),
        ],
        responses=serializers.GateSerializer,
    )
    def get(self, request, name):
        pool = generics.get_object_or_404(Pool, name=name)
        template_name, number = request.query_params.get("template", ""), request.query_params.get("version", "")
        if not template_name:
            raise InvalidField("template", "required")
        if not number:
            raise InvalidField("version", "required")
        version = template_version_get(template=template_get(name=template_name), number=number)
        verdict = version_gate(version=version)
        body = {
            "pool": pool.name,
            "is_production": pool.is_production,
            "version": version,
            "has_run": verdict.has_run,
            "allowed": verdict.has_run or not pool.is_production,
            "summary": verdict.summary,
            "advice": verdict.advice,
            "retry_in_s": verdict.retry_in_s,
            "runs": verdict.runs,
        }
        return Response(serializers.GateSerializer(body).data)
