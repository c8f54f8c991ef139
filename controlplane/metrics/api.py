"""REST endpoint of metric history, for the charts' time ranges and for scripts."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.lib.errors import NotFound
from controlplane.lib.serializers import validated
from controlplane.metrics import selectors, serializers
from controlplane.metrics.models import MetricSample
from controlplane.nodes.models import EngineNode, Pool


class MetricHistory(APIView):
    """One entity's figures over a time range: 1 s rows for ranges up to an hour, 60 s rows beyond.

    `GET /api/v1/metrics/<scope>/<name>/?metric=a,b&since=&until=`: scope `fleet` (name `fleet`), `pool` or `node`.
    Columns: `t` (unix seconds) and one list per figure, aligned with `t`; a count map's entries are objects.
    """

    @extend_schema(
        parameters=[
            OpenApiParameter("scope", str, OpenApiParameter.PATH, enum=MetricSample.Scope.values),
            OpenApiParameter("metric", str, required=True, description="comma-separated figures, e.g. qps,length_hist"),
            OpenApiParameter("since", str, description="unix seconds or ISO 8601; default: 5 minutes before until"),
            OpenApiParameter("until", str, description="unix seconds or ISO 8601; default: now"),
        ],
        responses=serializers.MetricHistorySerializer,
    )
    def get(self, request, scope, name):
        scope = _entity(scope, name)
        # An empty parameter is one not given, as with every other filter of the API.
        query = validated(
            serializers.HistoryQuerySerializer, {k: v for k, v in request.query_params.dict().items() if v != ""}
        )
        since, until, metrics = query["since"], query["until"], query["metric"]
        resolution = selectors.history_resolution(since=since, until=until)
        times, columns = selectors.history(
            scope=scope, name=name, metrics=metrics, since=since, until=until, resolution_s=resolution
        )
        return Response(
            {
                "scope": scope,
                "name": name,
                "resolution_s": resolution,
                "since": since.timestamp(),
                "until": until.timestamp(),
                "t": [t.timestamp() for t in times],
                "values": columns,
            }
        )


def _entity(scope: str, name: str) -> str:
    """The scope, once it is known and the pool or node exists."""
    row_scope = scope if scope in MetricSample.Scope.values else None
    known = {
        MetricSample.Scope.FLEET: lambda: name == MetricSample.FLEET_NAME,
        MetricSample.Scope.POOL: lambda: Pool.objects.filter(name=name).exists(),
        MetricSample.Scope.NODE: lambda: EngineNode.objects.filter(name=name).exists(),
    }
    if row_scope is None or not known[row_scope]():
        raise NotFound(f"no metrics for {scope}/{name}: scope is fleet/fleet, pool/<pool> or node/<node>")
    return row_scope
