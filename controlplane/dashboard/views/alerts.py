"""Alerting pages: the on-call page (live incidents, acknowledge, silence), alert rules, runbooks."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.alerts import coverage, runbooks, selectors, signals
from controlplane.alerts.models import AlertGroup, AlertRule, AlertRuleVersion, Silence
from controlplane.alerts.services import lifecycle, rules
from controlplane.dashboard import forms
from controlplane.dashboard.access import page
from controlplane.dashboard.live import live_numbers
from controlplane.lib import realtime
from controlplane.lib.errors import DomainError


@page()
def oncall(request):
    live_seq = live_numbers(realtime.alerts_group())  # before the state the page shows
    now = timezone.now()
    evaluator = selectors.evaluator_health(now=now)
    return render(
        request,
        "alerts/oncall.html",
        {
            "evaluator": evaluator,
            "incidents": [selectors.incident_summary(g) for g in selectors.open_incidents()],
            "pending": [selectors.alert_summary(a, evaluator=evaluator, now=now) for a in selectors.pending_alerts()],
            "resolved": [selectors.incident_summary(g) for g in selectors.recently_resolved_incidents(now=now)],
            "silences": selectors.active_silences(now=now),
            "no_source": sorted(coverage.uncovered_by_node(now=now).items()),
            "durations": forms.SILENCE_DURATIONS,
            "placeholder": INCIDENT_PLACEHOLDER,
            "live_seq": live_seq,
        },
    )


# The <template> the page clones for an incident that fires while it is open; oncall.js fills every field in.
INCIDENT_PLACEHOLDER = {
    "id": 0,
    "rule": "",
    "pool": "__pool__",
    "severity": "warning",
    "opened_at": "",
    "summary": "",
    "condition": "",
    "runbook": "",
    "runbook_url": "#",
    "affected": [],
    "affected_count": 0,
    "is_silenced": False,
    "acknowledged_by": None,
}


@require_POST
@page(write_action=Action.ALERT_RESPOND)
def incident_ack(request, pk):
    group = get_object_or_404(AlertGroup.objects.select_related("rule"), pk=pk)
    form = forms.AcknowledgeForm(request.POST)
    try:
        if not form.is_valid():
            raise DomainError("note: at most 2000 characters")
        lifecycle.alert_group_acknowledge(actor=request.user, group=group, note=form.cleaned_data["note"])
    except DomainError as exc:
        messages.error(request, f"Not acknowledged. {exc.message}")
    else:
        messages.success(request, f"Acknowledged: {group.rule.name} in {group.pool or 'the fleet'}.")
    return redirect("dashboard:oncall")


@require_POST
@page(write_action=Action.ALERT_RESPOND)
def silence_create(request):
    form = forms.SilenceForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Nothing silenced. " + _form_errors(form))
        return redirect("dashboard:oncall")
    data = form.cleaned_data
    try:
        silence = lifecycle.silence_create(actor=request.user, **data)
    except DomainError as exc:
        messages.error(request, f"Nothing silenced. {exc.message}")
    else:
        messages.success(request, f"Silenced {', '.join(f'{k}={v}' for k, v in silence.matchers.items())}.")
    return redirect("dashboard:oncall")


@require_POST
@page(write_action=Action.ALERT_RESPOND)
def silence_expire(request, pk):
    silence = get_object_or_404(Silence, pk=pk)
    form = forms.SilenceExpireForm(request.POST)
    try:
        if not form.is_valid():
            raise DomainError("reason: required: say why")
        lifecycle.silence_expire(actor=request.user, silence=silence, reason=form.cleaned_data["reason"])
    except DomainError as exc:
        messages.error(request, f"Silence not ended. {exc.message}")
    else:
        messages.success(request, "Silence ended; its alerts notify again.")
    return redirect("dashboard:oncall")


@page()
def rule_list(request):
    return render(request, "alerts/rule_list.html", {"versions": selectors.current_rule_versions()})


@page(write_action=Action.ALERT_RULE_WRITE)
def rule_detail(request, name):
    """GET shows the rule, its versions and (for SREs) the edit form; POST saves the next version."""
    rule = get_object_or_404(AlertRule, name=name)
    current = selectors.rule_current_version(rule)
    form = forms.AlertRuleForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = dict(form.cleaned_data)
            base_number = data.pop("base_version")
            comment = data.pop("comment")
            try:
                version = rules.alert_rule_version_create(
                    actor=request.user, rule=rule, base_number=base_number, comment=comment, **data
                )
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Saved {version}.")
                return redirect("dashboard:alert-rule", name=rule.name)
        status = 409 if any("stale" in e for e in form.non_field_errors()) else 400
    values = form.data if request.method == "POST" else {**current.fields(), "base_version": current.number}
    return render(
        request,
        "alerts/rule_detail.html",
        {
            "rule": rule,
            "current": current,
            "versions": rule.versions.select_related("author"),
            "form": form,
            "values": values,
            "metrics": signals.SIGNAL_CHOICES,
            "scopes": AlertRuleVersion.Scope.choices,
            "comparisons": AlertRuleVersion.Comparison.choices,
            "runbooks": runbooks.runbook_slugs(),
        },
        status=status,
    )


@page()
def runbook_list(request):
    return render(request, "alerts/runbook_list.html", {"runbooks": runbooks.runbook_list()})


@page()
def runbook_detail(request, slug):
    runbook = runbooks.runbook_get(slug)
    if runbook is None:
        raise Http404(f"no runbook {slug}")
    used_by = [v for v in selectors.current_rule_versions() if v.runbook == slug]
    return render(request, "alerts/runbook.html", {"runbook": runbook, "used_by": used_by})


def _form_errors(form) -> str:
    return "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
