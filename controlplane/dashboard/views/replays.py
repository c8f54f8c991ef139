"""Replay pages: the run list, the new-run form (pool, log, selection, pacing), one run live, cancel."""

from django import forms
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.convlogs.models import ConversationLog
from controlplane.dashboard.access import page
from controlplane.dashboard.views.replay_comparisons import figures_context
from controlplane.lib.errors import DomainError
from controlplane.metrics.selectors import simulated_node_counts
from controlplane.nodes.models import Pool
from controlplane.replays import selectors, services
from controlplane.replays.models import ReplayRun

REQUEST_ROWS_SHOWN = 50


class ReplayForm(forms.Form):
    pool = forms.ChoiceField()
    log = forms.ChoiceField()
    label = forms.CharField(max_length=200, required=False)
    reason = forms.CharField(max_length=2000)
    nodes = forms.CharField(max_length=2000, required=False, help_text="node names, comma-separated; empty: all")
    selection = forms.ChoiceField(choices=ReplayRun.Selection.choices)
    sample_size = forms.IntegerField(required=False)
    sample_seed = forms.IntegerField(required=False)
    top_n = forms.IntegerField(required=False)
    pacing = forms.ChoiceField(choices=ReplayRun.Pacing.choices)
    qps = forms.FloatField(required=False)
    qps_steps = forms.CharField(max_length=200, required=False, help_text="ladder: QPS steps, lowest first")
    step_s = forms.IntegerField(required=False, help_text="ladder: seconds per step")
    slo_p99_s = forms.FloatField(required=False, help_text="ladder: first-round P99 line per step (default 1.8 s)")
    arrival = forms.ChoiceField(choices=ReplayRun.Arrival.choices)
    time_scale = forms.FloatField(required=False)
    duration_cap_s = forms.IntegerField(initial=300)
    production_override_reason = forms.CharField(max_length=2000, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].choices = [
            (p.name, f"{p.name} (production)" if p.is_production else p.name)
            for p in Pool.objects.order_by("is_production", "name")
        ]
        self.fields["log"].choices = [(name, name) for name in ConversationLog.objects.values_list("name", flat=True)]


@page()
def replay_list(request):
    runs = selectors.replay_runs(pool=request.GET.get("pool") or None)[:200]
    return render(request, "replays/replay_list.html", {"runs": runs})


@page(Action.REPLAY_RUN, write_action=Action.REPLAY_RUN)
def replay_new(request):
    form = ReplayForm(request.POST or None, initial={"duration_cap_s": 300, "qps": 10})
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            ladder = data["pacing"] == ReplayRun.Pacing.LADDER
            try:
                run = services.replay_run_create(
                    actor=request.user,
                    pool=get_object_or_404(Pool, name=data["pool"]),
                    log=get_object_or_404(ConversationLog, name=data["log"]),
                    reason=data["reason"],
                    label=data["label"],
                    nodes=[n.strip() for n in data["nodes"].split(",") if n.strip()],
                    selection=data["selection"],
                    sample_size=data["sample_size"],
                    sample_seed=data["sample_seed"],
                    top_n=data["top_n"],
                    pacing=data["pacing"],
                    qps=None if ladder else data["qps"],
                    qps_steps=_steps(data["qps_steps"]) if ladder else None,
                    step_s=data["step_s"] if ladder else None,
                    slo_p99_s=data["slo_p99_s"] if ladder else None,
                    arrival=data["arrival"],
                    time_scale=data["time_scale"],
                    duration_cap_s=data["duration_cap_s"],
                    production_override_reason=data["production_override_reason"],
                )
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Replay {run.pk} queued.")
                return redirect("dashboard:replay-detail", pk=run.pk)
        status = 400
    return render(request, "replays/replay_new.html", {"form": form}, status=status)


def _steps(text: str) -> list:
    """`10, 20, 40` as numbers; a word that is not one stays as it is for the service to name."""
    steps = []
    for part in (p.strip() for p in text.split(",")):
        try:
            steps.append(float(part))
        except ValueError:
            steps.append(part)
    return [step for step in steps if step != ""]


@page()
def replay_detail(request, pk):
    run = get_object_or_404(selectors.replay_runs(), pk=pk)
    rows = selectors.replay_requests(run=run)[:REQUEST_ROWS_SHOWN]
    # Ended runs say what their window had; a running one, what its pool has now.
    simulated = (
        run.pool_metrics.get("simulated_nodes") if run.pool_metrics else simulated_node_counts(pool=run.pool.name)[0]
    )
    context = {"run": run, "rows": rows, "shown": REQUEST_ROWS_SHOWN, "simulated": simulated}
    if run.status in ReplayRun.FINISHED:
        context.update(figures_context(run))
    return render(request, "replays/replay_detail.html", context)


@require_POST
@page(write_action=Action.REPLAY_RUN)
def replay_cancel(request, pk):
    run = get_object_or_404(ReplayRun, pk=pk)
    try:
        services.replay_run_cancel(actor=request.user, run=run, reason=request.POST.get("reason", ""))
    except DomainError as exc:
        messages.error(request, f"Nothing cancelled. {exc.message}")
    else:
        messages.success(request, f"Replay {run.pk}: cancelling; sending stops within a second.")
    return redirect("dashboard:replay-detail", pk=pk)
