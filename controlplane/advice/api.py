"""REST endpoints for suggestions: a pool's and a template's, and opening one as a draft version."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts.roles import Action
from controlplane.advice import selectors, serializers
from controlplane.advice.services import suggestion_apply
from controlplane.convlogs.api import applied_version
from controlplane.convlogs.serializers import AppliedVersionSerializer
from controlplane.lib.errors import InvalidField
from controlplane.lib.openapi import conflict, not_found
from controlplane.lib.serializers import validated
from controlplane.nodes.models import Pool
from controlplane.params.selectors import template_get

APPLY_CONFLICT = conflict("`base_version` is stale, the pool runs no version, or the version already has the change.")
APPLY_GONE = not_found("The pool (or the suggestion, as the figures stand now) is not there.")


def _pool(name: str) -> Pool:
    return get_object_or_404(Pool.objects.select_related("desired_version__template"), name=name)


class PoolSuggestions(APIView):
    """The pool's suggestions now: the report's rules on its last ten minutes of figures, and its impact records."""

    @extend_schema(responses=serializers.PoolSuggestionsSerializer)
    def get(self, request, name):
        result = selectors.pool_suggestions(pool=_pool(name))
        return Response(serializers.PoolSuggestionsSerializer(result).data)


class TemplateSuggestions(APIView):
    """The suggestions of every pool that runs a version of the template."""

    @extend_schema(responses=serializers.TemplateSuggestionsSerializer)
    def get(self, request, name):
        result = selectors.template_suggestions(template=template_get(name=name))
        return Response(serializers.TemplateSuggestionsSerializer(result).data)


class PoolSuggestionApply(APIView):
    """Open one of the pool's suggestions as the next version of the template it runs; nothing is published."""

    required_action = Action.TEMPLATE_WRITE

    @extend_schema(
        request=serializers.DraftFromSuggestionSerializer,
        responses={201: AppliedVersionSerializer, 404: APPLY_GONE, 409: APPLY_CONFLICT},
    )
    def post(self, request, name):
        pool = _pool(name)
        data = validated(serializers.DraftFromSuggestionSerializer, request.data)
        version = suggestion_apply(
            actor=request.user,
            pool=pool,
            suggestion_id=data["suggestion"],
            base_number=data.get("base_version"),
            comment=data["comment"],
        )
        return Response(applied_version(version), status=status.HTTP_201_CREATED)


class TemplateSuggestionApply(APIView):
    """Open a suggestion of a pool that runs this template as the template's next version; nothing is published."""

    required_action = Action.TEMPLATE_WRITE

    @extend_schema(
        request=serializers.TemplateDraftFromSuggestionSerializer,
        responses={201: AppliedVersionSerializer, 404: APPLY_GONE, 409: APPLY_CONFLICT},
    )
    def post(self, request, name):
        template = template_get(name=name)
        data = validated(serializers.TemplateDraftFromSuggestionSerializer, request.data)
        pool = _pool(data["pool"])
        if pool.desired_version is None or pool.desired_version.template_id != template.pk:
            raise InvalidField("pool", f"pool {pool.name!r} does not run a version of template {template.name!r}")
        version = suggestion_apply(
            actor=request.user,
            pool=pool,
            suggestion_id=data["suggestion"],
            base_number=data.get("base_version"),
            comment=data["comment"],
        )
        return Response(applied_version(version), status=status.HTTP_201_CREATED)
