"""REST endpoints of the model catalog: list and register models, read and edit one."""

from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts.roles import Action
from controlplane.catalog import selectors, serializers, services
from controlplane.lib.openapi import conflict
from controlplane.lib.serializers import validated


class ModelEntryList(generics.ListAPIView):
    """Every registered model; POST registers one (SRE, admin; trust_remote_code: admin only)."""

    queryset = selectors.model_entries()
    serializer_class = serializers.ModelEntrySerializer
    required_action = Action.MODEL_WRITE
    filterset_fields = ["name", "is_draft_capable", "trust_remote_code"]

    @extend_schema(
        request=serializers.ModelEntryCreateSerializer,
        responses={201: serializers.ModelEntrySerializer, 409: conflict("A model with that name is in the catalog.")},
    )
    def post(self, request):
        data = validated(serializers.ModelEntryCreateSerializer, request.data)
        entry = services.model_entry_create(actor=request.user, **data)
        return Response(serializers.ModelEntrySerializer(entry).data, status=status.HTTP_201_CREATED)


class ModelEntryDetail(APIView):
    """One model; PATCH changes some of its fields (never the name) with a reason."""

    required_action = {"PATCH": Action.MODEL_WRITE}

    @extend_schema(responses=serializers.ModelEntrySerializer)
    def get(self, request, name):
        return Response(serializers.ModelEntrySerializer(selectors.model_entry_get(name=name)).data)

    @extend_schema(request=serializers.ModelEntryUpdateSerializer, responses=serializers.ModelEntrySerializer)
    def patch(self, request, name):
        entry = selectors.model_entry_get(name=name)
        data = validated(serializers.ModelEntryUpdateSerializer, request.data)
        reason = data.pop("reason")
        entry = services.model_entry_update(actor=request.user, entry=entry, changes=data, reason=reason)
        return Response(serializers.ModelEntrySerializer(entry).data)
