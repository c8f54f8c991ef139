"""Tuning pages: the study list, the new-study form (fields and ranges, objective, replay), one study live, cancel."""

from django import forms
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.convlogs.models import ConversationLog
from controlplane.dashboard.access import page
from controlplane.lib.errors import DomainError
from controlplane.metrics.selectors import simulated_node_counts
from controlplane.nodes.models import Pool
from controlplane.params.models import TemplateVersion
from controlplane.params.schema import FIELDS
from controlplane.replays.models import ReplayRun
from controlplane.tuning import selectors, services
from controlplane.tuning import space as search
from controlplane.tuning.models import TuningStudy
from controlplane.tuning.serializers import StudyDetailSerializer

SPACE_ROWS = 3
SEARCHABLE = [f for f in FIELDS if f.kind in search.SEARCHABLE_KINDS]


class StudyForm(forms.Form):
    pool = forms.ChoiceField()
    base_version = forms.ChoiceField()
    log = forms.ChoiceField()
    objective = forms.ChoiceField(choices=[(o, search.Objective.LABEL[o]) for o in search.Objective.ALL])
    sampler = forms.ChoiceField(choices=TuningStudy.Sampler.choices)
    budget = forms.IntegerField(min_value=1)
    seed = forms.IntegerField(initial=0)
    qps = forms.FloatField(required=False)
    qps_ladder = forms.CharField(max_length=200, required=False, help_text="for max_qps: QPS steps, lowest first")
    duration_s = forms.IntegerField(min_value=1)
    repeats = forms.IntegerField(required=False, help_text="replays per trial (1 if left empty); their median counts")
    repeats_p99 = forms.ChoiceField(
        choices=[("median", "median of the replays' P99s"), ("pooled", "P99 of their requests pooled")],
        required=False,
    )
    arrival = forms.ChoiceField(choices=ReplayRun.Arrival.choices)
    p99_max_s = forms.FloatField(required=False)
    error_rate_max = forms.FloatField(required=False)
    label = forms.CharField(max_length=200, required=False)
    reason = forms.CharField(max_length=2000)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Production pools are not offered: a study never runs there.
        self.fields["pool"].choices = [(p.name, p.name) for p in Pool.objects.filter(is_production=False)]
        versions = TemplateVersion.objects.select_related("template").order_by("template__name", "-number")[:200]
        self.fields["base_version"].choices = [(str(v.pk), str(v)) for v in versions]
        self.fields["log"].choices = [(name, name) for name in ConversationLog.objects.values_list("name", flat=True)]


def _value(text: str, kind: str):
    """One typed value of a form's comma-separated choices or range end, as the field's kind reads it."""
    text = text.strip()
    if kind == "bool":
        return {"true": True, "false": False}.get(text.lower(), text)
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text


def _space(post) -> list[dict]:
    """The form's rows of path, type, low, high, step, choices; empty rows are skipped."""
    kinds = {f.path: f.kind for f in SEARCHABLE}
    space = []
    for i in range(SPACE_ROWS):
        path = post.get(f"space-{i}-path", "").strip()
        if not path:
            continue
        kind = post.get(f"space-{i}-type", "int")
        row: dict = {"path": path, "type": kind}
        if kind == "choice":
            row["choices"] = [_value(c, kinds.get(path, "")) for c in post.get(f"space-{i}-choices", "").split(",")]
        else:
            for key in ("low", "high", "step"):
                text = post.get(f"space-{i}-{key}", "").strip()
                if text or key != "step":
                    row[key] = _value(text, kind) if text else None
        space.append(row)
    return space


@page()
def study_list(request):
    studies = selectors.studies(pool=request.GET.get("pool") or None)[:200]
    return render(request, "tuning/study_list.html", {"studies": studies})


@page(Action.TUNING_RUN, write_action=Action.TUNING_RUN)
def study_new(request):
    form = StudyForm(request.POST or None, initial={"budget": 12, "duration_s": 30, "repeats": 1, "qps": 50, "seed": 0})
    rows = [
        {
            "i": i,
            **{
                key: request.POST.get(f"space-{i}-{key}", "")
                for key in ("path", "type", "low", "high", "step", "choices")
            },
        }
        for i in range(SPACE_ROWS)
    ]
    context = {"form": form, "rows": rows, "types": ("int", "float", "choice"), "searchable": SEARCHABLE}
    if request.method != "POST":
        return render(request, "tuning/study_new.html", context)
    if form.is_valid():
        data = form.cleaned_data
        repeats = 1 if data["repeats"] is None else data["repeats"]
        replay = {"duration_s": data["duration_s"], "repeats": repeats, "arrival": data["arrival"]}
        if data["repeats_p99"]:
            replay["repeats_p99"] = data["repeats_p99"]
        if data["objective"] == search.Objective.MAX_QPS:
            replay["qps_ladder"] = [_value(q, "float") for q in data["qps_ladder"].split(",") if q.strip()]
        else:
            replay["qps"] = data["qps"]
        constraints = {k: data[k] for k in ("p99_max_s", "error_rate_max") if data[k] is not None}
        try:
            study = services.study_create(
                actor=request.user,
                pool=get_object_or_404(Pool, name=data["pool"]),
                base_version=get_object_or_404(TemplateVersion, pk=data["base_version"]),
                log=get_object_or_404(ConversationLog, name=data["log"]),
                space=_space(request.POST),
                objective=data["objective"],
                replay=replay,
                constraints=constraints,
                budget=data["budget"],
                sampler=data["sampler"],
                seed=data["seed"],
                label=data["label"],
                reason=data["reason"],
            )
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Study {study.pk} queued.")
            return redirect("dashboard:tuning-study", pk=study.pk)
    return render(request, "tuning/study_new.html", context, status=400)


@page()
def study_detail(request, pk):
    study = get_object_or_404(selectors.study_with_trials(), pk=pk)
    data = StudyDetailSerializer(study).data
    context = {
        "study": study,
        "trials": study.trials.all(),
        "objective_label": search.Objective.LABEL.get(study.objective, study.objective),
        "simulated": simulated_node_counts(pool=study.pool.name)[0],
        "chart": {
            "study": study.pk,
            "objective": study.objective,
            "direction": search.Objective.DIRECTION.get(study.objective),
            "label": search.Objective.LABEL.get(study.objective),
            "trials": data["trials"],
        },
    }
    return render(request, "tuning/study_detail.html", context)


@require_POST
@page(write_action=Action.TUNING_RUN)
def study_cancel(request, pk):
    study = get_object_or_404(TuningStudy, pk=pk)
    try:
        services.study_cancel(actor=request.user, study=study, reason=request.POST.get("reason", ""))
    except DomainError as exc:
        messages.error(request, f"Nothing cancelled. {exc.message}")
    else:
        messages.success(request, f"Study {study.pk}: cancelling; its replay stops within seconds.")
    return redirect("dashboard:tuning-study", pk=pk)
