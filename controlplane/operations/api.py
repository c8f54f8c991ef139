"""REST endpoints for conversation overrides (list those in effect, set one, revoke one) and pool degradation."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts.roles import Action
from controlplane.lib.errors import InvalidField
from controlplane.lib.openapi import conflict
from controlplane.lib.serializers import validated
from controlplane.nodes.models import Pool
from controlplane.operations import degradation, selectors, serializers, services
from controlplane.operations.models import ConversationOverride


class OverrideList(generics.ListAPIView):
    """Overrides in effect now; `pool` keeps those that apply to it (its own and all-pools ones)."""

    serializer_class = serializers.OverrideSerializer
    required_action = Action.OVERRIDE_SET

    @extend_schema(parameters=[OpenApiParameter("pool", str), OpenApiParameter("conversation", str)])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        pool = _pool(params["pool"]) if params.get("pool") else None
        return selectors.active_overrides(pool, conversation=params.get("conversation") or None).select_related(
            "revoked_by"
        )

    @extend_schema(
        request=serializers.OverrideSetSerializer,
        responses={
            201: serializers.OverrideSerializer,
            409: conflict("Someone set an override of the same conversation at the same moment (`override_race`)."),
        },
    )
    def post(self, request):
        data = validated(serializers.OverrideSetSerializer, request.data)
        pool_name = data.pop("pool")
        pool = _pool(pool_name) if pool_name is not None else None
        override = services.override_set(actor=request.user, pool=pool, **data)
        return Response(serializers.OverrideSerializer(override).data, status=status.HTTP_201_CREATED)


class OverrideRevoke(APIView):
    required_action = Action.OVERRIDE_SET

    @extend_schema(
        request=serializers.RevokeSerializer,
        responses={
            200: serializers.OverrideSerializer,
            409: conflict("The override was revoked or expired already (code `override_not_active`)."),
        },
    )
    def post(self, request, pk):
        override = get_object_or_404(ConversationOverride, pk=pk)
        data = validated(serializers.RevokeSerializer, request.data)
        override = services.override_revoke(actor=request.user, override=override, reason=data["reason"])
        return Response(serializers.OverrideSerializer(override).data)


def _pool(name: str) -> Pool:
    pool = Pool.objects.filter(name=name).first()
    if pool is None:
        raise InvalidField("pool", f"no pool named {name!r}; use null for every pool")
    return pool


class PoolDegradationView(APIView):
    """GET: the pool's degradation state and recent transitions. POST `{active, reason}`: degrade it now or end it."""

    required_action = Action.POOL_DEGRADE

    @extend_schema(responses={200: serializers.PoolDegradationSerializer})
    def get(self, request, name):
        pool = get_object_or_404(Pool, name=name)
        return Response(serializers.PoolDegradationSerializer(selectors.pool_degradation(pool=pool)).data)

    @extend_schema(
        request=serializers.DegradationSetSerializer,
        responses={
            200: serializers.PoolDegradationSerializer,
            409: conflict("The pool is degraded already (to enable) or is not degraded (to end it)."),
        },
    )
    def post(self, request, name):
        pool = get_object_or_404(Pool, name=name)
        data = validated(serializers.DegradationSetSerializer, request.data)
        switch = degradation.degradation_enable if data["active"] else degradation.degradation_disable
        switch(actor=request.user, pool=pool, reason=data["reason"])
        return Response(serializers.PoolDegradationSerializer(selectors.pool_degradation(pool=pool)).data)
