"""The landing page: every pool's desired version, recent releases and changes, and the background loops' health."""

from django.shortcuts import render
from django.utils import timezone

from controlplane.audit.models import AuditEntry
from controlplane.dashboard.access import page
from controlplane.dashboard.charts import fleet_charts
from controlplane.dashboard.live import live_numbers
from controlplane.dashboard.views.health import loop_rows
from controlplane.lib import realtime
from controlplane.nodes.models import Pool, PoolRelease
from controlplane.nodes.selectors import fleet_status_counts
from controlplane.params.models import ParameterTemplate


@page()
def overview(request):
    live_seq = live_numbers(realtime.fleet_group())  # before the state the page shows
    return render(
        request,
        "dashboard/overview.html",
        {
            "pools": Pool.objects.select_related("desired_version__template"),
            "fleet": fleet_status_counts(now=timezone.now()),
            "templates": ParameterTemplate.objects.all(),
            "releases": PoolRelease.objects.select_related("pool", "version__template", "actor")[:10],
            "recent": AuditEntry.objects.all()[:10],
            "charts": fleet_charts(),
            "loops": loop_rows(),
            "live_seq": live_seq,
        },
    )
