"""REST endpoints of run figures (with exports and the requests behind a figure) and replay comparisons."""

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts.roles import Action
from controlplane.lib.errors import InvalidField
from controlplane.lib.serializers import validated
from controlplane.replays import figure_selectors as selectors
from controlplane.replays.comparison_exports import FORMATS, check_format, comparison_export, run_figures_export
from controlplane.replays.comparison_serializers import (
    ComparisonCreateSerializer,
    ComparisonDetailSerializer,
    ComparisonSerializer,
    ReplayRequestRowSerializer,
    RunFiguresSerializer,
)
from controlplane.replays.comparison_services import replay_comparison_create
from controlplane.replays.models import ReplayRequest

FORMAT_PARAMETER = OpenApiParameter("format", enum=list(FORMATS), default="json")
EXPORT_RESPONSES = {(200, "application/json"): OpenApiTypes.OBJECT, (200, "text/csv"): OpenApiTypes.STR}


def _file(text: str, fmt: str, name: str) -> HttpResponse:
    content_type = "application/json" if fmt == "json" else "text/csv"
    response = HttpResponse(text.encode("utf-8"), content_type=f"{content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}.{fmt}"'
    return response


class RunFigures(generics.GenericAPIView):
    """A run's figures: P50-P999 latency and TTFT (each naming its request), throughput, error/429/503 rates,
    reply lengths, continuation rounds, per-intent latency and the pool's metrics over the run."""

    serializer_class = RunFiguresSerializer

    def get(self, request, pk):
        return Response(selectors.run_figures_payload(run=selectors.replay_run_get(pk=pk)))


class RunFiguresExport(APIView):
    """The run's figures as a JSON or CSV file."""

    @extend_schema(parameters=[FORMAT_PARAMETER], responses=EXPORT_RESPONSES)
    def get(self, request, pk):
        fmt = check_format(request.query_params.get("format"))
        payload = selectors.run_figures_payload(run=selectors.replay_run_get(pk=pk))
        return _file(run_figures_export(payload, fmt), fmt, f"replay-{pk}-figures")


class RunFigureRequests(generics.ListAPIView):
    """The requests behind one figure of the run, most extreme first: e.g. `latency.e2e_s.p99` lists the successful
    requests at or above the P99, `intents.coupon.count` the coupon questions, `errors.rate_429` the 429s."""

    serializer_class = ReplayRequestRowSerializer

    @extend_schema(parameters=[OpenApiParameter("figure", str, required=True)])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no run
            return ReplayRequest.objects.none()
        figure = self.request.query_params.get("figure") or ""
        if not figure:
            raise InvalidField("figure", "required: the figure's key, e.g. latency.e2e_s.p99")
        queryset, _ = selectors.figure_requests(run=selectors.replay_run_get(pk=self.kwargs["pk"]), figure=figure)
        return queryset


class ComparisonList(generics.ListAPIView):
    """Stored comparisons, newest first; POST compares finished runs of the same traffic (the first is the
    baseline) and stores the result under a permanent link."""

    serializer_class = ComparisonSerializer
    required_action = Action.REPLAY_RUN

    def get_queryset(self):
        return selectors.comparisons()

    @extend_schema(request=ComparisonCreateSerializer, responses={201: ComparisonDetailSerializer})
    def post(self, request):
        data = validated(ComparisonCreateSerializer, request.data)
        comparison = replay_comparison_create(
            actor=request.user,
            run_ids=data["runs"],
            label=data["label"],
            force=data["force"],
            reason=data["reason"],
            seed=data["seed"],
            resamples=data["resamples"],
        )
        comparison = selectors.comparisons().get(pk=comparison.pk)
        return Response(ComparisonDetailSerializer(comparison).data, status=status.HTTP_201_CREATED)


class ComparisonDetail(generics.GenericAPIView):
    serializer_class = ComparisonDetailSerializer

    def get(self, request, pk):
        comparison = selectors.comparisons().filter(pk=pk).first() or selectors.comparison_get(pk=pk)
        return Response(ComparisonDetailSerializer(comparison).data)


class ComparisonExport(APIView):
    """The comparison as a JSON file (as stored) or CSV (one figure per row, every run's value and difference)."""

    @extend_schema(parameters=[FORMAT_PARAMETER], responses=EXPORT_RESPONSES)
    def get(self, request, pk):
        fmt = check_format(request.query_params.get("format"))
        comparison = selectors.comparisons().filter(pk=pk).first() or selectors.comparison_get(pk=pk)
        payload = ComparisonDetailSerializer(comparison).data
        return _file(comparison_export(payload, fmt), fmt, f"replay-comparison-{pk}")
