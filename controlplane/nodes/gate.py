"""The production gate, read: has a version run on a non-production pool (services/version_runs.py), and if not, why.

The verdict is a cheap read of the recorded runs: the pool's publish refreshes the version's runs first, the pages
and the API read what the periodic watch recorded last.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count
from django.utils import timezone

from controlplane.lib.when import clock, duration
from controlplane.nodes.models import EngineNode, Pool, PoolRelease, VersionRun
from controlplane.params.models import TemplateVersion

RUNS_SHOWN = 20


@dataclass(frozen=True)
class GateVerdict:
    """`has_run`: production may get the version. `summary`: the evidence or what is missing, in one line;
    `advice`: what to do about it; `retry_in_s`: when a run under way completes its window."""

    has_run: bool
    summary: str
    advice: str = ""
    retry_in_s: float | None = None
    runs: list[VersionRun] = field(default_factory=list)

    @property
    def refusal(self) -> str:
        return f"has not run on a non-production pool yet: {self.summary}; {self.advice}"


def version_gate(*, version: TemplateVersion, now: datetime | None = None) -> GateVerdict:
    """The gate's verdict on one version, with its latest runs on non-production pools."""
    return version_gates(versions=[version], now=now)[version.pk]


def version_gates(*, versions, now: datetime | None = None) -> dict[int, GateVerdict]:
    """Verdicts on many versions (the publish form's list) in four queries."""
    now = now or timezone.now()
    ids = [v.pk for v in versions]
    runs: dict[int, list[VersionRun]] = defaultdict(list)
    for run in VersionRun.objects.filter(version_id__in=ids, pool__is_production=False).select_related("pool"):
        runs[run.version_id].append(run)
    released: dict[int, PoolRelease] = {}
    for release in PoolRelease.objects.filter(version_id__in=ids, pool__is_production=False).select_related("pool"):
        released.setdefault(release.version_id, release)  # newest first
    node_counts = dict(Pool.objects.filter(is_production=False).annotate(n=Count("nodes")).values_list("name", "n"))
    running: dict[int, list[str]] = defaultdict(list)
    nodes = EngineNode.objects.filter(pool__is_production=False, applied_version_id__in=ids).order_by("name")
    for version_id, name, pool in nodes.values_list("applied_version_id", "name", "pool__name"):
        running[version_id].append(f"{name} of {pool}")
    return {v.pk: _verdict(runs[v.pk], released.get(v.pk), node_counts, running[v.pk], now) for v in versions}


def _verdict(
    runs: list[VersionRun], release: PoolRelease | None, node_counts: dict, running: list[str], now: datetime
) -> GateVerdict:
    shown = runs[:RUNS_SHOWN]
    passed = [r for r in runs if r.state == VersionRun.State.PASSED]
    if passed:
        run = min(passed, key=lambda r: r.passed_at)
        return GateVerdict(
            True,
            f"ran on {run.pool.name}: {run.node_name} healthy for {duration(run.window_s)}"
            f" from {clock(run.started_at)}",
            runs=shown,
        )
    soaking = [r for r in runs if r.state == VersionRun.State.SOAKING]
    if soaking:
        run = min(soaking, key=lambda r: r.passes_at)
        held = max(0.0, (now - run.started_at).total_seconds())
        left = max(0.0, (run.passes_at - now).total_seconds())
        return GateVerdict(
            False,
            f"on {run.pool.name}: {run.node_name} for {duration(held)} of {duration(run.window_s)}",
            f"it counts once it has run healthy for the whole window, in {duration(left)}",
            retry_in_s=left,
            runs=shown,
        )
    if runs:
        run = runs[0]
        if run.state == VersionRun.State.NACKED:
            summary = f"NACKed on {run.pool.name} by {run.node_name}: {run.reason}"
            advice = f"publish a version that {run.pool.name} accepts"
        else:
            held = (run.healthy_until - run.started_at).total_seconds()
            summary = (
                f"on {run.pool.name}: {run.node_name} ran it for {duration(held)} of {duration(run.window_s)},"
                f" then {run.reason}"
            )
            advice = f"it counts once a node of {run.pool.name} runs it healthy for {duration(run.window_s)}"
        return GateVerdict(False, summary, advice, runs=shown)
    if running:
        # ACKed, but the watch (every 5 s) has not recorded a run yet: a stopped watch shows here.
        return GateVerdict(
            False,
            f"{', '.join(running)} run{'s' if len(running) == 1 else ''} it, not yet watched",
            "the gate's watch starts counting at its next pass (every 5 s)",
        )
    if release is not None:
        pool, nodes = release.pool, node_counts.get(release.pool.name, 0)
        if not nodes:
            summary = f"published to {pool.name} at {clock(release.created_at)}, which has no nodes to run it"
            advice = f"register a node in {pool.name}"
        else:
            summary = f"published to {pool.name} at {clock(release.created_at)}, but no node of it has ACKed it yet"
            advice = f"wait for a node to ACK it and run it healthy for {duration(pool.soak_s)}"
        return GateVerdict(False, summary, advice)
    return GateVerdict(False, "it was never published to a non-production pool", "publish it to staging first")
