"""REST endpoints for gateway client keys: list (any role), issue and revoke (SRE, admin)."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts.roles import Action
from controlplane.lib.errors import InvalidField
from controlplane.lib.openapi import conflict
from controlplane.lib.serializers import query_flag, validated
from controlplane.nodes import serializers
from controlplane.nodes.models import ClientKey, Pool
from controlplane.nodes.services import client_keys as services

_KEYS = ClientKey.objects.select_related("created_by", "revoked_by").prefetch_related("pools")


class ClientKeyList(APIView):
    """GET: keys, newest first (`?pool=` one pool's, `?active=true` live ones only). POST `{name, pools, kind?,
    business_tags?}`: issue a key; the response holds the key this once."""

    required_action = Action.CLIENT_KEY_MANAGE

    @extend_schema(
        parameters=[OpenApiParameter("pool", str), OpenApiParameter("active", bool)],
        responses=serializers.ClientKeyListSerializer,
    )
    def get(self, request):
        keys = _KEYS.order_by("-created_at", "-pk")
        if "pool" in request.query_params:
            keys = keys.filter(pools__name=request.query_params["pool"])
        if query_flag(request.query_params, "active"):
            keys = keys.filter(revoked_at__isnull=True)
        return Response({"results": serializers.ClientKeySerializer(keys, many=True).data})

    @extend_schema(
        request=serializers.ClientKeyCreateSerializer,
        responses={
            201: serializers.ClientKeyIssuedSerializer,
            409: conflict("A live key of that name exists: revoke it first."),
        },
    )
    def post(self, request):
        data = validated(serializers.ClientKeyCreateSerializer, request.data)
        pools = list(Pool.objects.filter(name__in=data["pools"]))
        missing = sorted(set(data["pools"]) - {pool.name for pool in pools})
        if missing:
            raise InvalidField("pools", f"no pool named {', '.join(missing)}")
        client_key, key = services.client_key_create(
            actor=request.user,
            name=data["name"],
            pools=pools,
            kind=data["kind"],
            business_tags=data["business_tags"],
        )
        client_key = _KEYS.get(pk=client_key.pk)
        return Response(
            {"client_key": serializers.ClientKeySerializer(client_key).data, "key": key},
            status=status.HTTP_201_CREATED,
        )


class ClientKeyRevoke(APIView):
    """Revoke a key `{reason}`: its pools' nodes refuse it within seconds."""

    required_action = Action.CLIENT_KEY_MANAGE

    @extend_schema(
        request=serializers.ReasonSerializer,
        responses={200: serializers.ClientKeySerializer, 409: conflict("The key is already revoked.")},
    )
    def post(self, request, pk):
        client_key = generics.get_object_or_404(ClientKey, pk=pk)
        data = validated(serializers.ReasonSerializer, request.data)
        services.client_key_revoke(actor=request.user, client_key=client_key, reason=data["reason"])
        return Response(serializers.ClientKeySerializer(_KEYS.get(pk=pk)).data)
