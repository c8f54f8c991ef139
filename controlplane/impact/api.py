"""REST endpoints for impact records: the list with its filters and one record. Records are written by the
services that make changes, so the API only reads."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics

from controlplane.impact import selectors, serializers
from controlplane.impact.models import ImpactRecord

FILTERS = [
    OpenApiParameter("field", str, description="A parameter field's dotted path that the change touched."),
    OpenApiParameter("pool", str),
    OpenApiParameter("template", str),
    OpenApiParameter("kind", str, enum=[k.value for k in ImpactRecord.Kind]),
    OpenApiParameter("outcome", str, enum=[o.value for o in ImpactRecord.Outcome]),
    OpenApiParameter("status", str, enum=[s.value for s in ImpactRecord.Status]),
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="Changes at or after this time."),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="Changes at or before this time."),
]
FILTER_NAMES = [p.name for p in FILTERS]


class ImpactRecordList(generics.ListAPIView):
    """Impact records, newest first, narrowed by `?field=` (dotted path), `?pool=`, `?template=`, `?kind=`,
    `?outcome=`, `?status=`, `?since=`, `?until=`."""

    serializer_class = serializers.ImpactRecordSerializer

    def get_queryset(self):
        params = self.request.query_params
        return selectors.impact_records(**{name: params.get(name, "") for name in FILTER_NAMES})

    @extend_schema(parameters=FILTERS)
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class ImpactRecordDetail(generics.RetrieveAPIView):
    """One impact record: the change, its field diff, both windows' figures, the verdicts and the load statement."""

    serializer_class = serializers.ImpactRecordSerializer

    def get_queryset(self):
        return selectors.impact_records()
