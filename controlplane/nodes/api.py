"""REST endpoints for pools: list, create, publish, roll back (with preview) and the release timeline."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts.roles import Action
from controlplane.lib.errors import InvalidField
from controlplane.lib.openapi import conflict, not_found
from controlplane.lib.serializers import validated
from controlplane.nodes import selectors, serializers
from controlplane.nodes.models import Pool, PoolRelease
from controlplane.nodes.services import pools as services
from controlplane.params.diff import needs_restart
from controlplane.params.selectors import template_get, template_version_get

NO_VERSION = not_found("No such pool, or no such template or version.")


class PoolList(generics.ListAPIView):
    queryset = Pool.objects.select_related("desired_version__template")
    serializer_class = serializers.PoolSerializer
    required_action = Action.POOL_WRITE
    filterset_fields = ["is_production"]

    @extend_schema(
        request=serializers.PoolCreateSerializer,
        responses={201: serializers.PoolSerializer, 409: conflict("A pool with that name exists.")},
    )
    def post(self, request):
        data = validated(serializers.PoolCreateSerializer, request.data)
        pool = services.pool_create(actor=request.user, **data)
        return Response(serializers.PoolSerializer(pool).data, status=status.HTTP_201_CREATED)


class PoolDetail(generics.RetrieveAPIView):
    queryset = Pool.objects.select_related("desired_version__template")
    serializer_class = serializers.PoolSerializer
    lookup_field = "name"


class PoolReleaseList(generics.ListAPIView):
    """The pool's history timeline, newest first."""

    serializer_class = serializers.ReleaseSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no pool name
            return PoolRelease.objects.none()
        return selectors.pool_timeline(pool=generics.get_object_or_404(Pool, name=self.kwargs["name"]))


class PoolPublish(APIView):
    required_action = Action.POOL_PUBLISH

    @extend_schema(
        request=serializers.PublishSerializer,
        responses={
            201: serializers.ReleaseSerializer,
            404: NO_VERSION,
            409: conflict(
                "The version is already the pool's desired version, a rollout is under way, or (code "
                "`production_gate`) a production pool gets a version that never ran on a non-production pool and "
                "no `override_reason` was given."
            ),
        },
    )
    def post(self, request, name):
        pool = generics.get_object_or_404(Pool, name=name)
        data = validated(serializers.PublishSerializer, request.data)
        version = _version(data["template"], data["version"])
        release = services.pool_publish(
            actor=request.user,
            pool=pool,
            version=version,
            reason=data["reason"],
            override_reason=data["override_reason"],
        )
        return Response(serializers.ReleaseSerializer(release).data, status=status.HTTP_201_CREATED)


class PoolRollbackPreview(APIView):
    """What a rollback would change, field by field, before anyone confirms it."""

    @extend_schema(
        parameters=[OpenApiParameter("template", str), OpenApiParameter("version", int)],
        responses=serializers.PreviewSerializer,
    )
    def get(self, request, name):
        pool = generics.get_object_or_404(Pool, name=name)
        if "version" in request.query_params:
            target = _version(request.query_params.get("template", ""), request.query_params["version"])
        else:
            target = selectors.pool_previous_version(pool=pool)
        changes = selectors.pool_change_preview(pool=pool, version=target) if target else []
        return Response(
            serializers.PreviewSerializer(
                {"target": target, "needs_restart": needs_restart(changes), "changes": [c.as_dict() for c in changes]}
            ).data
        )


class PoolRollback(APIView):
    required_action = Action.POOL_ROLLBACK

    @extend_schema(
        request=serializers.RollbackSerializer,
        responses={
            201: serializers.ReleaseSerializer,
            404: NO_VERSION,
            409: conflict("Nothing to roll back to (code `nothing_to_roll_back`), or the pool runs that version now."),
        },
    )
    def post(self, request, name):
        pool = generics.get_object_or_404(Pool, name=name)
        data = validated(serializers.RollbackSerializer, request.data)
        version = _version(data["template"], data["version"]) if "version" in data else None
        release = services.pool_rollback(actor=request.user, pool=pool, version=version, reason=data["reason"])
        return Response(serializers.ReleaseSerializer(release).data, status=status.HTTP_201_CREATED)


def _version(template_name: str, number):
    if not template_name:
        raise InvalidField("template", "required with version")
    return template_version_get(template=template_get(name=template_name), number=number)
