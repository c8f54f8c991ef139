"""Filters of the audit log, shared by the API, the CSV export and the dashboard page."""

import django_filters

from controlplane.audit.models import AuditEntry
from controlplane.lib.filters import UTCIsoDateTimeFilter


class AuditFilter(django_filters.FilterSet):
    actor = django_filters.CharFilter(field_name="actor_name")
    action = django_filters.CharFilter(field_name="action")
    target_type = django_filters.CharFilter(field_name="target_type")
    target_id = django_filters.CharFilter(field_name="target_id")
    target = django_filters.CharFilter(field_name="target_repr", lookup_expr="icontains")
    since = UTCIsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = UTCIsoDateTimeFilter(field_name="at", lookup_expr="lt")
    request_id = django_filters.CharFilter(field_name="request_id")

    class Meta:
        model = AuditEntry
        fields = ["actor", "action", "target_type", "target_id", "target", "since", "until", "request_id"]
