"""`/healthz`: this process's background loops, for probes and scripts; the overview page shows the same records."""

from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_safe

from controlplane.lib.loop_health import LoopState, loops_health, loops_report


@require_safe
def healthz(request):
    """200 when every loop is ok, 503 when one is failing, stalled or stopped; states and times, no error text."""
    report = loops_report()
    response = JsonResponse(report, status=200 if report["status"] == "ok" else 503)
    # The failing loop logged itself once; Django's line per 5xx would repeat it at every probe.
    response._has_been_logged = True
    return response


def loop_rows() -> list[dict]:
    """The overview's health line: every loop with its state, unhealthy ones first."""
    now = timezone.now()
    rows = [{"health": record, "state": record.state(now).value} for record in loops_health()]
    rows.sort(key=lambda row: (row["state"] == LoopState.OK, row["health"].loop))
    return rows
