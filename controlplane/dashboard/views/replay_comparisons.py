"""Replay comparison pages: the list with the compare form, one comparison (charts, figures side by side, verdict),
a run's figures section and the requests behind one figure."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render

from controlplane.accounts.roles import Action
from controlplane.dashboard.access import page
from controlplane.lib.errors import DomainError
from controlplane.replays import figure_selectors as selectors
from controlplane.replays.comparison_services import replay_comparison_create
from controlplane.replays.models import ReplayRun

RECENT_RUNS = 50


def finished_runs():
    return (
        ReplayRun.objects.filter(status__in=ReplayRun.FINISHED)
        .select_related("pool", "template_version__template")
        .order_by("-created_at")[:RECENT_RUNS]
    )


@page(write_action=Action.REPLAY_RUN)
def comparison_list(request):
    """Stored comparisons, and the form that compares finished runs (the first ticked is the baseline)."""
    error = None
    if request.method == "POST":
        try:
            run_ids = [int(value) for value in request.POST.getlist("runs")]
            baseline = request.POST.get("baseline")
            if baseline and baseline.isdigit() and int(baseline) in run_ids:
                run_ids.remove(int(baseline))
                run_ids.insert(0, int(baseline))
            comparison = replay_comparison_create(
                actor=request.user,
                run_ids=run_ids,
                label=request.POST.get("label", ""),
                force=request.POST.get("force") == "on",
                reason=request.POST.get("reason", ""),
            )
        except ValueError:
            error = "runs: tick the runs to compare"
        except DomainError as exc:
            error = exc.message
        else:
            messages.success(request, f"Comparison {comparison.pk} stored.")
            return redirect("dashboard:replay-comparison", pk=comparison.pk)
    return render(
        request,
        "replays/comparison_list.html",
        {
            "comparisons": selectors.comparisons()[:100],
            "runs": finished_runs(),
            "error": error,
            # "Compare this run with others" ticks it (and makes it the baseline).
            "preselected": set(request.POST.getlist("runs") or request.GET.getlist("runs")),
        },
        status=400 if error else 200,
    )


def _table_rows(result: dict) -> tuple[list[dict], list[dict]]:
    """The figure rows split into run-wide figures and per-intent ones, each value paired with its run."""
    runs = result["runs"]
    base_rows, intent_rows = [], []
    for row in result["figures"]:
        cells = [{"run": run, "value": value} for run, value in zip(runs, row["values"], strict=True)]
        diffs = [{"run": run, **cmp} for run, cmp in zip(runs[1:], row["comparisons"], strict=True)]
        entry = {**row, "cells": cells, "diffs": diffs}
        (intent_rows if row["key"].startswith("intents.") else base_rows).append(entry)
    return base_rows, intent_rows


@page()
def comparison_detail(request, pk: int):
    comparison = selectors.comparisons().filter(pk=pk).first() or selectors.comparison_get(pk=pk)
    result = comparison.result
    base_rows, intent_rows = _table_rows(result)
    charts = {
        "runs": [
            {
                "label": run["label"],
                "cdf": run["latency_cdf"],
                "intents": run["figures"]["intents"],
                "p999": run["figures"]["latency"]["e2e_s"]["p999"],
            }
            for run in result["runs"]
        ],
        "slo": result["slo"],
    }
    return render(
        request,
        "replays/comparison_detail.html",
        {
            "comparison": comparison,
            "result": result,
            "base_rows": base_rows,
            "intent_rows": intent_rows,
            "others": result["runs"][1:],
            "charts": charts,
        },
    )


@page()
def run_figures(request, pk: int):
    """A run's figures section on a page of its own (the run page includes the same section)."""
    run = selectors.replay_run_get(pk=pk)
    return render(request, "replays/run_figures.html", figures_context(run))


def figures_context(run: ReplayRun) -> dict:
    """What `replays/_run_figures.html` needs (the run page adds it to its own context)."""
    return {"run": run, "payload": selectors.run_figures_payload(run=run)}


@page()
def figure_requests(request, pk: int):
    run = selectors.replay_run_get(pk=pk)
    figure = request.GET.get("figure", "")
    try:
        queryset, info = selectors.figure_requests(run=run, figure=figure)
    except DomainError as exc:
        return render(request, "replays/figure_requests.html", {"run": run, "error": exc.message}, status=400)
    requests_page = Paginator(queryset, 100).get_page(request.GET.get("page"))
    return render(
        request,
        "replays/figure_requests.html",
        {"run": run, "info": info, "page": requests_page, "figure": figure, "label": selectors.run_label(run)},
    )
