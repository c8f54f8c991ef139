"""Reads of replay runs: the list with its filters, one run, its request rows in order."""

import re

from controlplane.lib.errors import SLUG_PATTERN, InvalidField
from controlplane.replays.models import ReplayRequest, ReplayRun

RUN_RELATED = ("pool", "created_by", "production_override_by", "cancelled_by", "template_version__template")


def replay_runs(*, pool: str | None = None, status: str | None = None):
    runs = ReplayRun.objects.select_related(*RUN_RELATED)
    if pool:
        # Only a pool name can match; anything else (a NUL byte, say) matches nothing rather than reaching SQL.
        runs = runs.filter(pool__name=pool) if re.fullmatch(SLUG_PATTERN, pool) else runs.none()
    if status:
        if status not in ReplayRun.Status.values:
            raise InvalidField("status", f"must be one of {', '.join(ReplayRun.Status.values)}; got {status!r}")
        runs = runs.filter(status=status)
    return runs


def replay_requests(*, run: ReplayRun, ok: bool | None = None):
    rows = ReplayRequest.objects.filter(run=run).order_by("seq")
    return rows if ok is None else rows.filter(ok=ok)
