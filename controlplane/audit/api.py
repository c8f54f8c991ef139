"""Read-only REST endpoints of the audit log, with filters and a CSV export."""

from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema
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

    @extend_schema(responses={(200, "text/csv"): str})
    def get(self, request):
        entries = audit_entries(params=request.query_params)
        response = StreamingHttpResponse(audit_csv_rows(entries), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="audit.csv"'
        return response
