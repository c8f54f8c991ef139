"""REST endpoints for replay runs: list and start, one run, cancel, its request rows (paged) and their export."""

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
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
from controlplane.replays import export, selectors, serializers, services
from controlplane.replays.models import ReplayRun

NO_RUN = not_found("No such replay run.")


def _named(model, field: str, name: str):
    found = model.objects.filter(name=name).first()
    if found is None:
        raise InvalidField(field, f"no {field} named {name!r}")
    return found


class ReplayRunList(generics.ListAPIView):
    """GET: runs, newest first (`?pool=`, `?status=`). POST: start a replay of a log against a non-production pool
    (or some of its nodes); a production pool needs an SRE's `production_override_reason`."""

    serializer_class = serializers.ReplayRunSerializer
    required_action = Action.REPLAY_RUN

    def get_queryset(self):
        params = self.request.query_params
        return selectors.replay_runs(pool=params.get("pool"), status=params.get("status"))

    @extend_schema(parameters=[OpenApiParameter("pool", str), OpenApiParameter("status", str)])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=serializers.ReplayRunCreateSerializer,
        responses={201: serializers.ReplayRunSerializer},
    )
    def post(self, request):
        data = validated(serializers.ReplayRunCreateSerializer, request.data)
        pool = _named(Pool, "pool", data.pop("pool"))
        log = _named(ConversationLog, "log", data.pop("log"))
        run = services.replay_run_create(actor=request.user, pool=pool, log=log, **data)
        run = selectors.replay_runs().get(pk=run.pk)
        return Response(serializers.ReplayRunSerializer(run).data, status=status.HTTP_201_CREATED)


class ReplayRunDetail(generics.RetrieveAPIView):
    serializer_class = serializers.ReplayRunSerializer

    def get_queryset(self):
        return selectors.replay_runs()


class ReplayRunCancel(APIView):
    """Cancel a queued or running run `{reason}`: sending stops within a second; rows so far are kept."""

    required_action = Action.REPLAY_RUN

    @extend_schema(
        request=serializers.ReplayCancelSerializer,
        responses={200: serializers.ReplayRunSerializer, 404: NO_RUN, 409: conflict("The run has already ended.")},
    )
    def post(self, request, pk):
        run = generics.get_object_or_404(ReplayRun, pk=pk)
        data = validated(serializers.ReplayCancelSerializer, request.data)
        services.replay_run_cancel(actor=request.user, run=run, reason=data["reason"])
        return Response(serializers.ReplayRunSerializer(selectors.replay_runs().get(pk=pk)).data)


def _ok_filter(params) -> bool | None:
    value = params.get("ok", "")
    if value == "":
        return None
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise InvalidField("ok", f"must be true or false, got {value!r}")


class ReplayRequestList(generics.ListAPIView):
    """One run's request rows in sequence order, paged (`?ok=false`: the failed ones)."""

    serializer_class = serializers.ReplayRequestSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return ReplayRun.objects.none()
        run = generics.get_object_or_404(ReplayRun, pk=self.kwargs["pk"])
        return selectors.replay_requests(run=run, ok=_ok_filter(self.request.query_params))

    @extend_schema(
        parameters=[OpenApiParameter("ok", bool)],
        responses={200: serializers.ReplayRequestSerializer(many=True), 404: NO_RUN},
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


EXPORT_FORMATS = {
    "csv": ("text/csv; charset=utf-8", export.csv_chunks),
    "jsonl": ("application/x-ndjson", export.jsonl_chunks),
}


class ReplayRequestExport(APIView):
    """All of a run's request rows, streamed: `?format=csv` (default) or `jsonl` (one JSON object a line)."""

    @extend_schema(
        parameters=[OpenApiParameter("format", str, enum=list(EXPORT_FORMATS))],
        responses={(200, "text/csv"): OpenApiTypes.STR, (200, "application/x-ndjson"): OpenApiTypes.STR, 404: NO_RUN},
    )
    def get(self, request, pk):
        run = generics.get_object_or_404(ReplayRun, pk=pk)
        fmt = request.query_params.get("format", "csv")
        if fmt not in EXPORT_FORMATS:
            raise InvalidField("format", f"must be one of {', '.join(EXPORT_FORMATS)}; got {fmt!r}")
        content_type, chunks = EXPORT_FORMATS[fmt]
        response = StreamingHttpResponse(chunks(selectors.replay_requests(run=run)), content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="replay-{run.pk}-requests.{fmt}"'
        return response
