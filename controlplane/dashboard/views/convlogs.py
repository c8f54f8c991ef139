"""Conversation log pages: the list with the upload form, a log with its analyses, an analysis with its charts,
per-intent table and suggestions (each a "Create version" button)."""

from django import forms
from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.convlogs import selectors
from controlplane.convlogs.services.analyses import log_analysis_apply, log_analysis_create
from controlplane.convlogs.services.logs import conversation_log_create
from controlplane.convlogs.suggestions import APPLICABLE_KINDS
from controlplane.dashboard.access import page
from controlplane.lib.errors import DomainError
from controlplane.nodes.models import Pool


class LogUploadForm(forms.Form):
    name = forms.CharField(max_length=64)
    description = forms.CharField(max_length=500, required=False)
    file = forms.FileField()
    pool = forms.CharField(max_length=64, required=False)
    coverage = forms.IntegerField(min_value=50, max_value=99, initial=90, required=False)


class AnalyseForm(forms.Form):
    pool = forms.CharField(max_length=64)
    coverage = forms.IntegerField(min_value=50, max_value=99, initial=90)


def _pools():
    return Pool.objects.filter(desired_version__isnull=False).select_related("desired_version__template")


@page(write_action=Action.CONVLOG_WRITE)
def log_list(request):
    return _render_list(request, LogUploadForm(initial={"coverage": 90}))


def _render_list(request, form, status=200):
    return render(
        request,
        "convlogs/log_list.html",
        {
            "logs": selectors.conversation_logs()[:200],
            "form": form,
            "pools": _pools(),
            "max_mib": settings.CONVERSATION_LOG_MAX_BYTES >> 20,
        },
        status=status,
    )


@require_POST
@page(write_action=Action.CONVLOG_WRITE)
def log_upload(request):
    """Store the uploaded log (streamed to disk by Django's upload handlers) and, with a pool chosen, analyse it."""
    form = LogUploadForm(request.POST, request.FILES)
    if not form.is_valid():
        return _render_list(request, form, status=400)
    data = form.cleaned_data
    pool = _pools().filter(name=data["pool"]).first() if data["pool"] else None
    if data["pool"] and pool is None:
        form.add_error("pool", "no pool with a published version has that name")
        return _render_list(request, form, status=400)
    try:
        log = conversation_log_create(
            actor=request.user,
            name=data["name"],
            description=data["description"],
            filename=data["file"].name,
            chunks=data["file"].chunks(),
        )
        analysis = None
        if pool is not None:
            analysis = log_analysis_create(actor=request.user, log=log, pool=pool, coverage=data["coverage"] or 90)
    except DomainError as exc:
        form.add_error(None, exc.message)
        return _render_list(request, form, status=exc.status_code if exc.status_code == 413 else 400)
    messages.success(request, f"Log {log.name} stored ({log.size_bytes} bytes, {log.get_format_display()}).")
    if analysis is not None:
        return redirect("dashboard:log-analysis", name=log.name, pk=analysis.pk)
    return redirect("dashboard:log-detail", name=log.name)


@page(write_action=Action.CONVLOG_WRITE)
def log_detail(request, name):
    """A log's facts and analyses; POST queues an analysis against a pool."""
    log = selectors.conversation_log_get(name=name)
    form = AnalyseForm(request.POST or None, initial={"coverage": 90})
    if request.method == "POST" and form.is_valid():
        pool = _pools().filter(name=form.cleaned_data["pool"]).first()
        if pool is None:
            form.add_error("pool", "no pool with a published version has that name")
        else:
            try:
                analysis = log_analysis_create(
                    actor=request.user, log=log, pool=pool, coverage=form.cleaned_data["coverage"]
                )
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                return redirect("dashboard:log-analysis", name=log.name, pk=analysis.pk)
    return render(
        request,
        "convlogs/log_detail.html",
        {"log": log, "analyses": selectors.log_analyses(log=log), "form": form, "pools": _pools()},
        status=400 if request.method == "POST" else 200,
    )


@page()
def log_analysis(request, name, pk):
    log = selectors.conversation_log_get(name=name)
    analysis = selectors.log_analysis_get(log=log, pk=pk)
    result = analysis.result or {}
    suggestions = analysis.suggestions or []
    replies = result.get("replies", {})
    reply_rows = [
        (label, {**replies[key], "at_most_256": _complement(replies[key]["above"]["256"])})
        for label, key in (("All replies", "all"), ("First turn", "first_turn"), ("Later turns", "later_turns"))
        if key in replies
    ]
    return render(
        request,
        "convlogs/analysis.html",
        {
            "log": log,
            "analysis": analysis,
            "result": result,
            "intents": result.get("intents", []),
            "suggestions": suggestions,
            "reply_rows": reply_rows,
            "charts": {
                "histograms": result.get("histograms"),
                "cap": result.get("cap"),
                "long_context_threshold": result.get("long_context_threshold"),
            },
            "applicable": any(item["applicable"] for item in suggestions),
        },
    )


def _complement(share: float | None) -> float | None:
    return None if share is None else 1 - share


@require_POST
@page(write_action=Action.TEMPLATE_WRITE)
def log_analysis_apply_page(request, name, pk):
    """One suggestion (`kind`) or all applicable ones (`kind=all`) as the next version of the analysed template."""
    analysis = selectors.log_analysis_get(log=selectors.conversation_log_get(name=name), pk=pk)
    kind = request.POST.get("kind", "")
    kinds = None if kind == "all" else [kind] if kind in APPLICABLE_KINDS else [kind or "(none)"]
    try:
        version = log_analysis_apply(
            actor=request.user, analysis=analysis, kinds=kinds, comment=request.POST.get("comment", "")
        )
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("dashboard:log-analysis", name=name, pk=pk)
    messages.success(request, f"Saved {version.ref} from analysis {analysis.pk}; it is not published.")
    return redirect("dashboard:version-detail", name=version.template.name, number=version.number)
