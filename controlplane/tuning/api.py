"""REST endpoints for tuning studies: list and start, one study with its trials, cancel."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts.roles import Action
from controlplane.convlogs.models import ConversationLog
from controlplane.lib.errors import InvalidField
from controlplane.lib.openapi import conflict, not_found
from controlplane.lib.serializers import validated
from controlplane.nodes.models import Pool
from controlplane.params.models import TemplateVersion
from controlplane.tuning import selectors, serializers, services
from controlplane.tuning.models import TuningStudy

NO_STUDY = not_found("No such tuning study.")


def _named(model, field: str, name: str):
    found = model.objects.filter(name=name).first()
    if found is None:
        raise InvalidField(field, f"no {field} named {name!r}")
    return found


class StudyList(generics.ListAPIView):
    """GET: studies, newest first (`?pool=`, `?status=`). POST: start a study on a non-production pool (SRE, admin):
    each trial saves a candidate version, publishes it to the pool, waits for the ACKs and replays the log."""

    serializer_class = serializers.StudySerializer
    required_action = Action.TUNING_RUN

    def get_queryset(self):
        params = self.request.query_params
        return selectors.studies(pool=params.get("pool"), status=params.get("status"))

    @extend_schema(parameters=[OpenApiParameter("pool", str), OpenApiParameter("status", str)])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=serializers.StudyCreateSerializer,
        responses={201: serializers.StudyDetailSerializer, 409: conflict("The pool is being tuned already.")},
    )
    def post(self, request):
        data = validated(serializers.StudyCreateSerializer, request.data)
        pool = _named(Pool, "pool", data.pop("pool"))
        template_name, number = data.pop("template"), data.pop("base_version")
        base = TemplateVersion.objects.filter(template__name=template_name, number=number).first()
        if base is None:
            raise InvalidField("base_version", f"template {template_name!r} has no version {number}")
        log = _named(ConversationLog, "log", data.pop("log"))
        study = services.study_create(actor=request.user, pool=pool, base_version=base, log=log, **data)
        study = selectors.study_with_trials().get(pk=study.pk)
        return Response(serializers.StudyDetailSerializer(study).data, status=status.HTTP_201_CREATED)


class StudyDetail(generics.RetrieveAPIView):
    """One study with every trial: candidate values, version, replay run, measured figures, feasible or not."""

    serializer_class = serializers.StudyDetailSerializer

    def get_queryset(self):
        return selectors.study_with_trials()


class StudyCancel(APIView):
    """Cancel a queued or running study `{reason}`: its replay is cancelled, no further trial starts."""

    required_action = Action.TUNING_RUN

    @extend_schema(
        request=serializers.StudyCancelSerializer,
        responses={
            200: serializers.StudyDetailSerializer,
            404: NO_STUDY,
            409: conflict("The study has already ended."),
        },
    )
    def post(self, request, pk):
        study = generics.get_object_or_404(TuningStudy, pk=pk)
        data = validated(serializers.StudyCancelSerializer, request.data)
        services.study_cancel(actor=request.user, study=study, reason=data["reason"])
        return Response(serializers.StudyDetailSerializer(selectors.study_with_trials().get(pk=pk)).data)
