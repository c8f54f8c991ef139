"""Read-only REST endpoints of the audit log, with filters and a CSV export."""

from django.http import StreamingHttpResponse
from django_filters import IsoDateTimeFilter
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics
from rest_framework.views import APIView

from controlplane.audit.filters import AuditFilter
from controlplane.audit.selectors import audit_csv_rows, audit_entries
from controlplane.audit.serializers import AuditEntrySerializer


class AuditList(generics.ListAPIView):
    serializer_class = AuditEntrySerializer
    filterset_class = AuditFilter

    def get_queryset(self):
        return audit_entries(params=self.request.query_params)

    def filter_queryset(self, queryset):
        return queryset


class AuditExport(APIView):
    """The filtered audit log as CSV."""

    @extend_schema(
        parameters=[
            OpenApiParameter(name, OpenApiTypes.DATETIME if isinstance(f, IsoDateTimeFilter) else str)
            for name, f in AuditFilter.base_filters.items()
        ],
        responses={(200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request):
        entries = audit_entries(params=request.query_params)
        response = StreamingHttpResponse(audit_csv_rows(entries), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="audit.csv"'
        return response
