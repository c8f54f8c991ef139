"""The audit log page: filters, pages of entries, a link to the same rows as CSV."""

from django.core.paginator import Paginator
from django.shortcuts import render

from controlplane.audit.filters import AuditFilter
from controlplane.audit.models import AuditEntry
from controlplane.audit.selectors import audit_entries
from controlplane.dashboard.access import page


@page()
def audit_log(request):
    params = request.GET.copy()
    page_number = params.pop("page", ["1"])[-1]
    entries = audit_entries(params=params)
    paginator = Paginator(entries, 50)
    return render(
        request,
        "audit/audit_log.html",
        {
            "page_obj": paginator.get_page(page_number),
            "filter": AuditFilter(params, queryset=AuditEntry.objects.none()),
            "actions": AuditEntry.objects.order_by("action").values_list("action", flat=True).distinct(),
            "query": params.urlencode(),
        },
    )
